//! Where each key of a YAML document is, so that errors can name a line and a key path, and
//! what text each key takes up, so that a key found wrong can be left out of the next reading.
//!
//! The document is read a second time into a schema-free tree of spanned nodes, flattened into
//! a list of entries (key path, where the key is, where its value starts, the text it takes up)
//! in document order. That answers both questions an error needs: "which key is at this line
//! and column?" (serde errors know the place, not the key) and "which line holds this key?"
//! (validation knows the key, not the place).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};
use std::fmt;
use std::ops::Range;

/// A line and column, both counted from 1.
pub(crate) type Position = (u64, u64);

/// One key of the document, or one element of a sequence.
#[derive(Debug)]
struct Entry {
    /// `rus[1].feds`.
    path: String,
    /// Where the key is; for a sequence element, where the element starts.
    key: Position,
    /// Where the value starts.
    value: Position,
    /// The bytes of the text that the key and its value take up, with the `,` that separates it
    /// from its neighbour in a flow collection or the `-` before a block sequence's element:
    /// without them the document reads as if the key had not been written. `None` when the
    /// parser did not say where its bytes are.
    text: Option<Range<usize>>,
}

/// Every key of a document, in document order; entry 0 is the document itself.
#[derive(Debug)]
pub(crate) struct KeyMap {
    entries: Vec<Entry>,
}

/// The index of an entry of a [`KeyMap`]; [`KeyMap::DOCUMENT`] is the whole document.
pub(crate) type EntryIndex = usize;

impl KeyMap {
    /// The entry of the whole document.
    pub(crate) const DOCUMENT: EntryIndex = 0;

    /// Reads `text`; fails only when it is not YAML at all (the schema is not looked at).
    pub(crate) fn read(text: &str) -> Result<KeyMap, serde_saphyr::Error> {
        // `.nan` and `.inf` are YAML; whether a key may hold them is for the typed read to say.
        let mut options = serde_saphyr::Options::default();
        options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
        let root: Spanned<Node> = serde_saphyr::from_str_with_options(text, options)?;
        // The root has the empty path, so that an error at the start of the document (a missing
        // top-level key) is not taken for one about the first key.
        let at = position(root.referenced);
        let mut map = KeyMap { entries: vec![Entry { path: String::new(), key: at, value: at, text: None }] };
        map.flatten(text, "", &root);
        Ok(map)
    }

    /// Adds the entries inside `node`, whose path is `prefix`; returns where its text ends.
    fn flatten(&mut self, text: &str, prefix: &str, node: &Spanned<Node>) -> Option<usize> {
        let start = byte_offset(node.referenced)?;
        let end = match &node.value {
            Node::Scalar => start + usize::try_from(node.referenced.span().byte_len()?).ok()?,
            Node::Map(entries) => {
                let mut end = start;
                for (key, value) in entries {
                    let path =
                        if prefix.is_empty() { key.value.0.clone() } else { format!("{prefix}.{}", key.value.0) };
                    let index = self.entries.len();
                    let key_text = byte_offset(key.referenced);
                    let key_end = key_text.zip(key.referenced.span().byte_len()).map(|(s, n)| s + n as usize);
                    self.entries.push(Entry {
                        path: path.clone(),
                        key: position(key.referenced),
                        value: position(value.referenced),
                        text: None,
                    });
                    let value_end = self.flatten(text, &path, value).max(key_end);
                    self.entries[index].text = key_text.zip(value_end).map(|(s, e)| entry_text(text, s..e, false));
                    end = end.max(value_end.unwrap_or(end));
                }
                closed(text, start, end, '{', '}')
            }
            Node::Seq(items) => {
                let mut end = start;
                let block = !text[start..].starts_with('[');
                for (index, item) in items.iter().enumerate() {
                    let path = format!("{prefix}[{index}]");
                    let at = position(item.referenced);
                    let entry = self.entries.len();
                    self.entries.push(Entry { path: path.clone(), key: at, value: at, text: None });
                    let item_end = self.flatten(text, &path, item);
                    let item_text = byte_offset(item.referenced).zip(item_end);
                    self.entries[entry].text = item_text.map(|(s, e)| entry_text(text, s..e, block));
                    end = end.max(item_end.unwrap_or(end));
                }
                closed(text, start, end, '[', ']')
            }
        };
        Some(end)
    }

    /// The entry of what is at `at`: the key `unknown` if the error is about that unknown key
    /// and it is there, else the outermost value that starts there, else a key that is there,
    /// else the last key before it; [`KeyMap::DOCUMENT`] for the whole document.
    ///
    /// The unknown key's name is needed because the first key of a mapping is where the mapping
    /// starts: at `rus[0]`'s place, "missing field" is about `rus[0]`, "unknown field `fedz`"
    /// about `rus[0].fedz`.
    pub(crate) fn entry_at(&self, at: Position, unknown: Option<&str>) -> EntryIndex {
        let entries = || self.entries.iter().enumerate();
        let named = |e: &Entry| unknown.is_some_and(|name| e.key == at && e.path.rsplit('.').next() == Some(name));
        let found = entries().find(|(_, e)| named(e));
        let found = found.or_else(|| entries().find(|(_, e)| e.value == at));
        let found = found.or_else(|| entries().find(|(_, e)| e.key == at));
        let found = found.or_else(|| entries().rev().find(|(_, e)| e.key <= at));
        found.map_or(KeyMap::DOCUMENT, |(index, _)| index)
    }

    /// The mapping that lacks a required key, from the place the parser reports it at (the
    /// mapping itself when it starts there, else its last key), and where the mapping is.
    pub(crate) fn missing_at(&self, at: Position) -> (EntryIndex, Position) {
        let owner = match self.entries.iter().position(|e| e.value == at) {
            Some(mapping) => mapping,
            None => match self.entries.iter().position(|e| e.key == at) {
                Some(last_key) => {
                    let path = &self.entries[last_key].path;
                    let parent = path.rfind(['.', '[']).map_or("", |end| &path[..end]);
                    self.entries.iter().position(|e| e.path == parent).unwrap_or(last_key)
                }
                None => return (self.entry_at(at, None), at),
            },
        };
        (owner, self.entries[owner].key)
    }

    /// The key path of `entry`, `None` for the whole document.
    pub(crate) fn path(&self, entry: EntryIndex) -> Option<&str> {
        Some(self.entries[entry].path.as_str()).filter(|path| !path.is_empty())
    }

    /// The keys of the top-level mapping.
    pub(crate) fn top_level_keys(&self) -> impl Iterator<Item = &str> + Clone {
        self.entries.iter().skip(1).map(|e| e.path.as_str()).filter(|path| !path.contains(['.', '[']))
    }

    /// The key path of the sequence of which `entry` is an element (leaving it out moves the
    /// ones after it), if it is one.
    pub(crate) fn list_of(&self, entry: EntryIndex) -> Option<&str> {
        let path = self.entries[entry].path.as_str();
        path.ends_with(']').then(|| path.rfind('[').map(|end| &path[..end])).flatten()
    }

    /// Where the key `path` is written; when it is absent (a missing key, or a default), where
    /// its nearest written ancestor is.
    pub(crate) fn position_of(&self, path: &str) -> Option<Position> {
        let mut path = path;
        loop {
            if let Some(e) = self.entries.iter().find(|e| e.path == path && !path.is_empty()) {
                return Some(e.key);
            }
            path = &path[..path.rfind(['.', '['])?];
        }
    }

    /// `text` with the entries `left_out` replaced by spaces (line breaks kept, one space a
    /// character), so that every other key stays at its line and column; `None` if the parser
    /// did not say where one of them is.
    pub(crate) fn without(&self, text: &str, left_out: &[EntryIndex]) -> Option<String> {
        let ranges = left_out.iter().map(|&e| self.entries[e].text.clone()).collect::<Option<Vec<_>>>()?;
        let blank = |at: usize| ranges.iter().any(|r| r.contains(&at));
        Some(text.char_indices().map(|(at, c)| if c != '\n' && c != '\r' && blank(at) { ' ' } else { c }).collect())
    }
}

/// Whether the key path `path` is `ancestor` or inside it.
pub(crate) fn is_within(path: &str, ancestor: &str) -> bool {
    ancestor.is_empty()
        || path.strip_prefix(ancestor).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// The text of an entry that takes up `text[range]`, widened by its `,` in a flow collection
/// (the one after it, else the one before it) or, for a block sequence's element, its `-`
/// (which may be on a line before).
fn entry_text(text: &str, range: Range<usize>, block_element: bool) -> Range<usize> {
    let blank = |c: char| c == ' ' || c == '\t';
    let after = range.end + text[range.end..].len() - text[range.end..].trim_start_matches(blank).len();
    if text[after..].starts_with(',') {
        return range.start..after + 1;
    }
    let before = text[..range.start].trim_end_matches(blank);
    if before.ends_with(',') {
        return before.len() - 1..range.end;
    }
    // An element's text may start on the line after its `-`.
    let before = text[..range.start].trim_end();
    if block_element && before.ends_with('-') {
        return before.len() - 1..range.end;
    }
    range
}

/// Where the text of a collection that starts at `start` ends, its last element ending at
/// `end`: after its closing bracket if it is a flow collection (`open` ... `close`), else `end`.
fn closed(text: &str, start: usize, end: usize, open: char, close: char) -> usize {
    if !text[start..].starts_with(open) {
        return end;
    }
    // Between the last element and the bracket there may be spaces, line breaks, a trailing
    // comma and comments.
    let mut rest = &text[end.max(start + 1)..];
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        match rest.strip_prefix('#') {
            Some(comment) => rest = comment.split_once('\n').map_or("", |(_, next)| next),
            None => break,
        }
    }
    let trimmed = rest;
    let at = text.len() - trimmed.len();
    if trimmed.starts_with(close) { at + close.len_utf8() } else { end }
}

/// A line and column from the parser, or `None` when it does not know.
pub(crate) fn known(location: Location) -> Option<Position> {
    (location != Location::UNKNOWN && location.line() > 0).then(|| position(location))
}

fn position(location: Location) -> Position {
    (location.line(), location.column())
}

fn byte_offset(location: Location) -> Option<usize> {
    usize::try_from(location.span().byte_offset()?).ok()
}

/// A node of the document with only the structure kept.
#[derive(Debug)]
enum Node {
    Map(Vec<(Spanned<KeyText>, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    Scalar,
}

/// A mapping key as text, whatever scalar type it was written as.
#[derive(Debug)]
struct KeyText(String);

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_i128<E>(self, _: i128) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_u128<E>(self, _: u128) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_str<E>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key()? {
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Map(entries))
    }
}

impl<'de> Deserialize<'de> for KeyText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = KeyText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scalar mapping key")
    }

    fn visit_bool<E>(self, v: bool) -> Result<KeyText, E> {
        Ok(KeyText(v.to_string()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<KeyText, E> {
        Ok(KeyText(v.to_string()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<KeyText, E> {
        Ok(KeyText(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<KeyText, E> {
        Ok(KeyText(v.to_string()))
    }
    fn visit_str<E>(self, v: &str) -> Result<KeyText, E> {
        Ok(KeyText(v.to_owned()))
    }
    fn visit_unit<E>(self) -> Result<KeyText, E> {
        Ok(KeyText("null".to_owned()))
    }
    fn visit_none<E>(self) -> Result<KeyText, E> {
        Ok(KeyText("null".to_owned()))
    }
    // A complex key (a mapping or sequence used as a key) is legal YAML; no Tessera key is one,
    // so it only needs a name for the "unknown key" error that follows.
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<KeyText, A::Error> {
        de::IgnoredAny.visit_seq(seq)?;
        Ok(KeyText("[...]".to_owned()))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<KeyText, A::Error> {
        de::IgnoredAny.visit_map(map)?;
        Ok(KeyText("{...}".to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "run:\n  number: 3\nrus:\n  - name: ru0\n    feds: \"1024\"\n  - name: ru1\n    feds: 4-7\n";

    #[test]
    fn finds_the_line_of_a_key_path() {
        let map = KeyMap::read(TEXT).unwrap();
        assert_eq!(map.position_of("run.number"), Some((2, 3)));
        assert_eq!(map.position_of("rus[1].feds"), Some((7, 5)));
        assert_eq!(map.position_of("rus[1]"), Some((6, 5)));
        // Absent keys fall back to their nearest ancestor.
        assert_eq!(map.position_of("rus[1].faults[0]"), Some((6, 5)));
        assert_eq!(map.position_of("bus[0].name"), None);
    }

    /// The key path of the entry at `at`.
    fn path_at<'a>(map: &'a KeyMap, at: Position, unknown: Option<&str>) -> Option<&'a str> {
        map.path(map.entry_at(at, unknown))
    }

    #[test]
    fn finds_the_key_path_at_a_place() {
        let map = KeyMap::read(TEXT).unwrap();
        assert_eq!(path_at(&map, (7, 11), None), Some("rus[1].feds"));
        assert_eq!(path_at(&map, (5, 5), None), Some("rus[0].feds"));
        assert_eq!(path_at(&map, (6, 5), None), Some("rus[1]"));
        assert_eq!(path_at(&map, (6, 5), Some("name")), Some("rus[1].name"));
        assert_eq!(path_at(&map, (2, 20), None), Some("run.number"));
        assert_eq!(path_at(&map, (1, 1), None), None);
        assert_eq!(path_at(&map, (1, 1), Some("run")), Some("run"));
    }

    #[test]
    fn finds_the_mapping_that_misses_a_key() {
        let map = KeyMap::read(TEXT).unwrap();
        let missing_at = |at| {
            let (entry, place) = map.missing_at(at);
            (map.path(entry), place)
        };
        // The parser reports a missing key at the mapping's last key, or where it starts.
        assert_eq!(missing_at((5, 5)), (Some("rus[0]"), (4, 5)));
        assert_eq!(missing_at((4, 5)), (Some("rus[0]"), (4, 5)));
        assert_eq!(missing_at((2, 3)), (Some("run"), (1, 1)));
        assert_eq!(missing_at((1, 1)), (None, (1, 1)));
    }

    /// `text` without the entries at `paths`.
    fn without(text: &str, paths: &[&str]) -> String {
        let map = KeyMap::read(text).unwrap();
        let entries: Vec<_> = paths.iter().map(|p| map.entries.iter().position(|e| e.path == *p).unwrap()).collect();
        map.without(text, &entries).unwrap()
    }

    #[test]
    fn leaves_out_block_entries_and_elements_in_place() {
        let text = "run:\n  numbr: 3\n  seconds: 2 # two\nrus:\n  - name: ru0\n    feds: \"1024\"\n  - name: ru1\n    feds: 4-7\nx: |\n  a\n  b\ny: 1\n";
        assert_eq!(
            without(text, &["run.numbr", "rus[0]", "x"]),
            "run:\n          \n  seconds: 2 # two\nrus:\n             \n                \n  - name: ru1\n    feds: 4-7\n    \n   \n   \ny: 1\n"
        );
        // A whole section, nested keys and all; the line and column of what follows are kept.
        let left = without(text, &["run"]);
        assert_eq!(left.lines().nth(2), Some("             # two"));
        assert_eq!(KeyMap::read(&left).unwrap().position_of("rus[1].feds"), Some((8, 5)));
    }

    #[test]
    fn leaves_out_flow_entries_with_their_comma() {
        let text = "rus: [{name: ru0, fedz: 3, feds: 1}, {name: ru1, feds: [2, 3]}]\nbus: [{name: bu0, x: é}]\n";
        assert_eq!(
            without(text, &["rus[0].fedz", "rus[1].feds", "bus[0].x"]),
            "rus: [{name: ru0,          feds: 1}, {name: ru1              }]\nbus: [{name: bu0      }]\n"
        );
        assert_eq!(
            without(text, &["rus[0]"]),
            "rus: [                               {name: ru1, feds: [2, 3]}]\nbus: [{name: bu0, x: é}]\n"
        );
        assert_eq!(without("a: {b: 1}\nc: [1, # one\n  2,\n]\n", &["a", "c"]), "         \n            \n    \n \n");
    }
}
