//! Reading a YAML file into a checked value, with errors that name the file, line, column and
//! key path: shared by the system file and the filter unit's selection menu (`tessera_fu::menu`),
//! which reads its own file with [`read_yaml`] and checks it with a [`Problems`](crate::Problems).
//!
//! The parser stops at the first mistake. To report them all, the file is read again without
//! the key found wrong (its text replaced by spaces, so that every other key keeps its line and
//! column), until it reads: an unknown key is then gone, and a wrong value is replaced by its
//! default. A key that has no default takes the mapping around it along (a unit, a path), and
//! what leaving that out brings about (a missing key, an empty list) is not reported again. The
//! value read is then validated, and its problems are reported except those with keys that were
//! left out (their defaults stood in) and those that name a list that lost an element (the
//! elements after it moved up).

use crate::error::{ConfigError, ConfigErrors, Place, ValidationError};
use crate::locate::{EntryIndex, KeyMap, Position, is_within, known};
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_saphyr::MessageFormatter as _;
use std::fmt;
use std::path::Path;

/// Reads a `T` from `text`, the contents of the file `origin` (named in errors), and checks it
/// with `validate`, which lists every problem it finds.
///
/// A validation error is placed at the line of the key it names; a key left at its default is
/// not in the text, so the line is that of its nearest written ancestor, or unknown when there
/// is none.
pub fn read_yaml<T: DeserializeOwned>(
    text: &str,
    origin: &Path,
    validate: impl FnOnce(&T) -> Vec<ValidationError>,
) -> Result<T, ConfigErrors> {
    let place = |at: Option<Position>, key: Option<&str>| Place {
        file: origin.to_owned(),
        line: at.map(|(line, _)| line),
        column: at.map(|(_, column)| column),
        key: key.map(str::to_owned),
    };
    // Read the bare structure first: if that fails the text is not YAML, and if it works it
    // knows where every key is.
    let keys = match KeyMap::read(text) {
        Ok(keys) => keys,
        Err(e) => {
            let error = ConfigError::Syntax { place: place(error_position(&e), None), message: message(&e) };
            return Err(ConfigErrors::new(origin, vec![error]));
        }
    };
    let mut errors = Vec::new();
    // The entries left out of the text, and the lists that lost an element with them.
    let mut left_out: Vec<EntryIndex> = Vec::new();
    let mut shortened: Vec<&str> = Vec::new();
    // The keys that an unknown key looked like a slip for (`rus[0].feds` for `rus[0].fedz`):
    // when one of them is then missing, that is the same mistake.
    let mut meant: Vec<String> = Vec::new();
    let value = loop {
        let Some(rest) = keys.without(text, &left_out) else { break None };
        let e = match serde_saphyr::from_str::<T>(&rest) {
            Ok(value) => break Some(value),
            Err(e) => e,
        };
        let message = message(&e);
        let Some(at) = error_position(&e) else {
            errors.push(ConfigError::Schema { place: place(None, None), message });
            break None;
        };
        let was_left_out = |path: Option<&str>| left_out.iter().any(|&gone| keys.path(gone) == path);
        let (entry, at, consequence) = match missing_field(&message) {
            // The parser places a missing key at the last key of its mapping: name the mapping.
            Some(field) => {
                let (mapping, at) = keys.missing_at(at);
                let key = keys.path(mapping).map_or_else(|| field.to_owned(), |m| format!("{m}.{field}"));
                let consequence = was_left_out(Some(&key)) || meant.contains(&key);
                (mapping, at, consequence)
            }
            None => {
                let entry = keys.entry_at(at, unknown_field(&message));
                let path = keys.path(entry).unwrap_or("");
                // A mapping or list whose key or element was left out may no longer read.
                let emptied =
                    left_out.iter().any(|&gone| keys.path(gone).is_some_and(|p| p != path && is_within(p, path)));
                (entry, at, emptied)
            }
        };
        // An error about what is already left out comes of leaving it out; reading stops there,
        // as it does when the whole document would have to go.
        let path = keys.path(entry);
        let gone = left_out.iter().any(|&e| keys.path(e).is_some_and(|p| is_within(path.unwrap_or(""), p)));
        if !consequence && !gone {
            if let (Some(path), Some(_), Some(name)) = (path, unknown_field(&message), did_you_mean(&message)) {
                meant.push(
                    path.rfind(['.', '[']).map_or_else(|| name.to_owned(), |end| format!("{}.{name}", &path[..end])),
                );
            }
            let message = explain(message, text, at);
            errors.push(ConfigError::Schema { place: place(Some(at), path), message });
        }
        if entry == KeyMap::DOCUMENT || gone {
            break None;
        }
        if let Some(list) = keys.list_of(entry) {
            shortened.push(list);
        }
        left_out.push(entry);
    };
    if let Some(value) = &value {
        let left_out: Vec<&str> = left_out.iter().filter_map(|&e| keys.path(e)).collect();
        for problem in validate(value) {
            // A key that was left out has its default, which is not what the file says; an
            // element of a list that lost one may be another than the one written there.
            let moved = |list: &&str| is_within(&problem.key, list) || problem.message.contains(&format!("{list}["));
            if left_out.iter().any(|&gone| is_within(&problem.key, gone)) || shortened.iter().any(moved) {
                continue;
            }
            // Validation knows the key, not the place; the key map finds the line where the
            // key, or its nearest written ancestor, is.
            let at = keys.position_of(&problem.key);
            errors.push(ConfigError::Invalid { place: place(at, Some(&problem.key)), message: problem.message });
        }
    }
    match value {
        Some(value) if errors.is_empty() => Ok(value),
        _ => {
            // In the order of the file; a problem without a line after those with one.
            errors.sort_by_key(|e| e.place().map(|p| (p.line.unwrap_or(u64::MAX), p.column.unwrap_or(0))));
            Err(ConfigErrors::new(origin, errors))
        }
    }
}

/// The key that serde says is missing: it words it "missing field `NAME`".
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `").and_then(|rest| rest.split_once('`')).map(|(name, _)| name)
}

/// The key that serde says is not allowed: it words it "unknown field `NAME`, expected ...".
fn unknown_field(message: &str) -> Option<&str> {
    message.strip_prefix("unknown field `").and_then(|rest| rest.split_once('`')).map(|(name, _)| name)
}

/// What became of a key that earlier versions took, so that an old file is told what to write
/// instead of a guess at a slip.
fn retired(key: &str) -> Option<&'static str> {
    match key {
        "fragment_timeout_ms" => Some(
            "`ru.fragment_timeout_ms` is gone: a silent FED now holds its events (and the trigger) until it sends, \
             its stream ends or an operator masks it; to give up on a silent FED after a while, set \
             `silent_fed_give_up_ms`",
        ),
        _ => None,
    }
}

/// The parser's message made to say what was expected and what was found: the value found for
/// a type mismatch, the nearest name allowed for an unknown key or variant.
fn explain(message: String, text: &str, at: Position) -> String {
    let message = with_found(message, text, at);
    if let Some(why) = unknown_field(&message).and_then(retired) {
        return format!("{message}; {why}");
    }
    match did_you_mean(&message) {
        Some(name) => format!("{message}; did you mean `{name}`?"),
        None => message,
    }
}

/// For "unknown field `fedz`, expected one of name, feds" (or "unknown variant"), the allowed
/// name nearest to the one written, if one is near enough to be a slip: a third of its letters
/// (at least two) wrong, missing or extra.
fn did_you_mean(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `").or_else(|| message.strip_prefix("unknown variant `"))?;
    let (written, rest) = rest.split_once('`')?;
    let allowed = rest.strip_prefix(", expected one of ")?;
    let near_enough = (written.chars().count() / 3).max(2);
    allowed
        .split(", ")
        .map(|name| (edit_distance(written, name), name))
        .filter(|&(distance, _)| distance <= near_enough)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, name)| name)
}

/// The number of letters to change, add or remove to turn `a` into `b` (Levenshtein).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    // The distances from a prefix of `a` to every prefix of `b`, one prefix of `a` longer each
    // round.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// A type mismatch worded by the parser as "invalid u32" says what was expected and what was
/// found: the scalar at `at` in `text`.
fn with_found(message: String, text: &str, (line, column): Position) -> String {
    let Some(ty) = message.strip_prefix("invalid ") else { return message };
    let (expected, ty) = match ty {
        "u8" | "u16" | "u32" | "u64" | "usize" => ("a whole number of 0 or more", ty),
        "i8" | "i16" | "i32" | "i64" | "isize" => ("a whole number", ty),
        "f32" | "f64" | "floating point" => ("a number", "f64"),
        "bool" | "boolean" => ("true or false", "bool"),
        _ => return message,
    };
    // The value from its column (counted in characters) to the end of its line or flow item.
    let found: String = usize::try_from(line)
        .ok()
        .and_then(|line| text.lines().nth(line.checked_sub(1)?))
        .map(|line| line.chars().skip(usize::try_from(column).unwrap_or(usize::MAX).saturating_sub(1)).collect())
        .unwrap_or_default();
    let found = found.split([',', '}', ']', '#']).next().unwrap_or_default().trim();
    format!("expected {expected} ({ty}), found {found:?}")
}

/// The text of the file at `path`.
///
/// # Errors
/// [`ConfigError::Read`] when it cannot be read.
pub fn read_text(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path)
        .map_err(|reason| ConfigErrors::new(path, vec![ConfigError::Read { file: path.to_owned(), reason }]))
}

/// The parser's line and column of `e`, if it knows them.
fn error_position(e: &serde_saphyr::Error) -> Option<(u64, u64)> {
    e.location().and_then(known)
}

/// The parser's message for `e` without its location (the [`Place`] says where) or snippet,
/// with control characters escaped so it prints on one line.
fn message(e: &serde_saphyr::Error) -> String {
    let mut inner = e;
    while let serde_saphyr::Error::WithSnippet { error, .. } | serde_saphyr::Error::AliasError { error, .. } = inner {
        inner = error;
    }
    let text = serde_saphyr::DefaultMessageFormatter.format_message(inner);
    text.chars().flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] }).collect()
}

/// The top-level keys of the YAML mapping in `text`, in the order written; none when `text` is
/// not YAML.
pub fn top_level_keys(text: &str) -> Vec<String> {
    KeyMap::read(text).map(|keys| keys.top_level_keys().map(str::to_owned).collect()).unwrap_or_default()
}

/// The keys of the mapping that `T` is read from: the names serde gives its fields.
pub fn keys_of<T: DeserializeOwned>() -> &'static [&'static str] {
    T::deserialize(FieldProbe).err().map_or(&[], |fields| fields.0)
}

/// A deserializer that reads nothing and fails with the fields of the struct asked of it.
struct FieldProbe;

/// The fields of a struct, carried out of [`FieldProbe`] as its error.
#[derive(Debug)]
struct Fields(&'static [&'static str]);

impl fmt::Display for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fields {}", self.0.join(", "))
    }
}

impl std::error::Error for Fields {}

impl de::Error for Fields {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Fields(&[])
    }
}

impl<'de> Deserializer<'de> for FieldProbe {
    type Error = Fields;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
        Err(Fields(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Fields> {
        Err(Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_letters_to_change() {
        assert_eq!(edit_distance("numbr", "number"), 1);
        assert_eq!(edit_distance("fedz", "feds"), 1);
        assert_eq!(edit_distance("contine", "continue"), 1);
        assert_eq!(edit_distance("", "run"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("run", "run"), 0);
    }

    #[test]
    fn suggests_the_nearest_allowed_name_only_when_near() {
        let unknown = |name: &str| format!("unknown field `{name}`, expected one of run, trigger, rus, ru, bus, bu");
        assert_eq!(did_you_mean(&unknown("runn")), Some("run"));
        // `run`, `rus` and `ru` are each one letter from `ruz`: the first one listed is taken.
        assert_eq!(did_you_mean(&unknown("ruz")), Some("run"));
        assert_eq!(did_you_mean(&unknown("tigger")), Some("trigger"));
        assert_eq!(did_you_mean(&unknown("colour")), None);
        assert_eq!(did_you_mean("unknown variant `fial`, expected one of continue, fail"), Some("fail"));
        assert_eq!(did_you_mean("missing field `rus`"), None);
    }

    #[test]
    fn knows_the_keys_of_a_struct() {
        assert!(keys_of::<crate::SystemConfig>().contains(&"controller"));
        assert_eq!(top_level_keys("run: {number: 3}\nrus: []\n"), ["run", "rus"]);
        assert!(top_level_keys("[1, 2]").is_empty());
    }
}
