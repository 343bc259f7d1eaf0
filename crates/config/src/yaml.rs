//! Reading a YAML file into a checked value, with errors that name the file, line, column and
//! key path: shared by the system file and the selection menu.

use crate::error::{ConfigError, Place, ValidationError};
use crate::locate::{KeyMap, known};
use serde::de::DeserializeOwned;
use serde_saphyr::MessageFormatter as _;
use std::path::Path;

/// Reads a `T` from `text`, the contents of the file `origin` (named in errors), and checks it
/// with `validate`.
///
/// A validation error is placed at the line of the key it names; a key left at its default is
/// not in the text, so the line is that of its nearest written ancestor, or unknown when there
/// is none.
pub(crate) fn read_yaml<T: DeserializeOwned>(
    text: &str,
    origin: &Path,
    validate: impl FnOnce(&T) -> Result<(), ValidationError>,
) -> Result<T, ConfigError> {
    let place = |at: Option<(u64, u64)>, key: Option<String>| Place {
        file: origin.to_owned(),
        line: at.map(|(line, _)| line),
        column: at.map(|(_, column)| column),
        key,
    };
    // Read the bare structure first: if that fails the text is not YAML, and if it works it
    // knows where every key is.
    let keys = match KeyMap::read(text) {
        Ok(keys) => keys,
        Err(e) => return Err(ConfigError::Syntax { place: place(error_position(&e), None), message: message(&e) }),
    };
    let value: T = serde_saphyr::from_str(text).map_err(|e| {
        let at = error_position(&e);
        let message = message(&e);
        // serde words it "unknown field `NAME`, expected ...".
        let unknown =
            message.strip_prefix("unknown field `").and_then(|rest| rest.split_once('`')).map(|(name, _)| name);
        let (at, key) = match at {
            // The parser places a missing key at the last key of its mapping: name the mapping.
            Some(at) if message.starts_with("missing field `") => {
                let (key, mapping) = keys.missing_at(at);
                (Some(mapping), key)
            }
            Some(at) => (Some(at), keys.path_at(at, unknown)),
            None => (None, None),
        };
        let message = with_found(message, text, at);
        ConfigError::Schema { place: place(at, key.map(str::to_owned)), message }
    })?;
    validate(&value).map_err(|e| {
        // Validation knows the key, not the place; the key map finds the line where the key, or
        // its nearest written ancestor, is.
        let at = keys.position_of(&e.key);
        ConfigError::Invalid { place: place(at, Some(e.key)), message: e.message }
    })?;
    Ok(value)
}

/// A type mismatch worded by the parser as "invalid u32" says what was expected and what was
/// found: the scalar at `at` in `text`.
fn with_found(message: String, text: &str, at: Option<(u64, u64)>) -> String {
    let Some(ty) = message.strip_prefix("invalid ").filter(|t| !t.contains(' ')) else { return message };
    let expected = match ty {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number of 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "bool" => "true or false",
        _ => return message,
    };
    let found = at
        .and_then(|(line, column)| {
            let line = text.lines().nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
            line.get(usize::try_from(column).ok()?.checked_sub(1)?..)
        })
        .map(|rest| rest.split([',', '}', ']', '#']).next().unwrap_or(rest).trim().to_owned())
        .unwrap_or_default();
    format!("expected {expected} ({ty}), found {found:?}")
}

/// The text of the file at `path`.
pub(crate) fn read_text(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { file: path.to_owned(), source })
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
