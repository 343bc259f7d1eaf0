//! Where each key of a YAML document is, so that errors can name a line and a key path.
//!
//! The document is read a second time into a schema-free tree of spanned nodes, flattened into
//! a list of entries (key path, where the key is, where its value starts) in document order.
//! That answers both questions an error needs: "which key is at this line and column?" (serde
//! errors know the place, not the key) and "which line holds this key?" (validation knows the
//! key, not the place).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};
use std::fmt;

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
}

/// Every key of a document, in document order.
#[derive(Debug)]
pub(crate) struct KeyMap {
    entries: Vec<Entry>,
}

impl KeyMap {
    /// Reads `text`; fails only when it is not YAML at all (the schema is not looked at).
    pub(crate) fn read(text: &str) -> Result<KeyMap, serde_saphyr::Error> {
        // `.nan` and `.inf` are YAML; whether a key may hold them is for the typed read to say.
        let mut options = serde_saphyr::Options::default();
        options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
        let root: Spanned<Node> = serde_saphyr::from_str_with_options(text, options)?;
        // The root has the empty path, so that an error at the start of the document (a missing
        // top-level key) is not taken for one about the first key.
        let at = position(root.referenced);
        let mut map = KeyMap { entries: vec![Entry { path: String::new(), key: at, value: at }] };
        map.flatten(String::new(), &root.value);
        Ok(map)
    }

    fn flatten(&mut self, prefix: String, node: &Node) {
        match node {
            Node::Map(entries) => {
                for (key, value) in entries {
                    let path =
                        if prefix.is_empty() { key.value.0.clone() } else { format!("{prefix}.{}", key.value.0) };
                    let key = position(key.referenced);
                    self.entries.push(Entry { path: path.clone(), key, value: position(value.referenced) });
                    self.flatten(path, &value.value);
                }
            }
            Node::Seq(items) => {
                for (index, item) in items.iter().enumerate() {
                    let path = format!("{prefix}[{index}]");
                    let at = position(item.referenced);
                    self.entries.push(Entry { path: path.clone(), key: at, value: at });
                    self.flatten(path, &item.value);
                }
            }
            Node::Scalar => {}
        }
    }

    /// The key path of what is at `at`: the key `unknown` if the error is about that unknown
    /// key and it is there, else the outermost value that starts there, else a key that is
    /// there, else the last key before it. `None` for the whole document.
    ///
    /// The unknown key's name is needed because the first key of a mapping is where the mapping
    /// starts: at `rus[0]`'s place, "missing field" is about `rus[0]`, "unknown field `fedz`"
    /// about `rus[0].fedz`.
    pub(crate) fn path_at(&self, at: Position, unknown: Option<&str>) -> Option<&str> {
        let named = |e: &&Entry| unknown.is_some_and(|name| e.key == at && e.path.rsplit('.').next() == Some(name));
        let found = self.entries.iter().find(named);
        let found = found.or_else(|| self.entries.iter().find(|e| e.value == at));
        let found = found.or_else(|| self.entries.iter().find(|e| e.key == at));
        let found = found.or_else(|| self.entries.iter().rev().find(|e| e.key <= at));
        found.map(|e| e.path.as_str()).filter(|path| !path.is_empty())
    }

    /// The mapping that lacks a required key, from the place the parser reports it at (the
    /// mapping itself when it starts there, else its last key): the mapping's key path (`None`
    /// for the whole document) and where the mapping is.
    pub(crate) fn missing_at(&self, at: Position) -> (Option<&str>, Position) {
        let owner = match self.entries.iter().find(|e| e.value == at) {
            Some(mapping) => mapping,
            None => match self.entries.iter().find(|e| e.key == at) {
                Some(last_key) => {
                    let parent = last_key.path.rfind(['.', '[']).map_or("", |end| &last_key.path[..end]);
                    self.entries.iter().find(|e| e.path == parent).unwrap_or(last_key)
                }
                None => return (self.path_at(at, None), at),
            },
        };
        (Some(owner.path.as_str()).filter(|path| !path.is_empty()), owner.key)
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
}

/// A line and column from the parser, or `None` when it does not know.
pub(crate) fn known(location: Location) -> Option<Position> {
    (location != Location::UNKNOWN && location.line() > 0).then(|| position(location))
}

fn position(location: Location) -> Position {
    (location.line(), location.column())
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

    #[test]
    fn finds_the_key_path_at_a_place() {
        let map = KeyMap::read(TEXT).unwrap();
        assert_eq!(map.path_at((7, 11), None), Some("rus[1].feds"));
        assert_eq!(map.path_at((5, 5), None), Some("rus[0].feds"));
        assert_eq!(map.path_at((6, 5), None), Some("rus[1]"));
        assert_eq!(map.path_at((6, 5), Some("name")), Some("rus[1].name"));
        assert_eq!(map.path_at((2, 20), None), Some("run.number"));
        assert_eq!(map.path_at((1, 1), None), None);
        assert_eq!(map.path_at((1, 1), Some("run")), Some("run"));
    }

    #[test]
    fn finds_the_mapping_that_misses_a_key() {
        let map = KeyMap::read(TEXT).unwrap();
        // The parser reports a missing key at the mapping's last key, or where it starts.
        assert_eq!(map.missing_at((5, 5)), (Some("rus[0]"), (4, 5)));
        assert_eq!(map.missing_at((4, 5)), (Some("rus[0]"), (4, 5)));
        assert_eq!(map.missing_at((2, 3)), (Some("run"), (1, 1)));
        assert_eq!(map.missing_at((1, 1)), (None, (1, 1)));
    }
}
