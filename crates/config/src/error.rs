//! What can be wrong with a system file or a menu file. Every error names the file and, where
//! known, the line, the column and the key path (`rus[1].feds`), then says what was expected.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in a system or menu file a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The file, as it was given.
    pub file: PathBuf,
    /// Line, from 1, when known.
    pub line: Option<u64>,
    /// Column, from 1, when known (only with a line).
    pub column: Option<u64>,
    /// Key path such as `rus[1].feds`, when known.
    pub key: Option<String>,
}

impl fmt::Display for Place {
    /// `system.yaml:12:5: rus[1].feds`, leaving out what is not known.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        Ok(())
    }
}

/// A system or menu file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("{}: cannot read it: {reason}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why, as the system says it (said in the message: an error's source is not printed
        /// everywhere this one is).
        reason: std::io::Error,
    },
    /// The text is not YAML.
    #[error("{place}: not valid YAML: {message}")]
    Syntax {
        /// Where.
        place: Place,
        /// What the YAML parser expected.
        message: String,
    },
    /// The YAML does not have the shape of a system (or menu): an unknown key (the message lists
    /// the keys allowed there), a value of the wrong type, a missing required key.
    #[error("{place}: {message}")]
    Schema {
        /// Where.
        place: Place,
        /// What was expected.
        message: String,
    },
    /// Each value has the right type but together they do not make a system that can run (or a
    /// menu that can select).
    #[error("{place}: {message}")]
    Invalid {
        /// Where.
        place: Place,
        /// What is wrong and what would be right.
        message: String,
    },
}

impl ConfigError {
    /// Where the problem is, or `None` for a file that cannot be read.
    pub fn place(&self) -> Option<&Place> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Syntax { place, .. }
            | ConfigError::Schema { place, .. }
            | ConfigError::Invalid { place, .. } => Some(place),
        }
    }
}

/// A semantic problem found by [`SystemConfig::validate`](crate::SystemConfig::validate) or
/// `tessera_fu::menu::Menu::validate`, before it is tied to a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ValidationError {
    /// Key path of the value at fault, such as `rus[1].feds`.
    pub key: String,
    /// What is wrong and what would be right.
    pub message: String,
}

/// Every mistake found in one system or menu file, in the order of the file: reading goes on
/// past an unknown key, a value of the wrong type or a value out of range, so that one check
/// shows them all.
#[derive(Debug)]
pub struct ConfigErrors {
    file: PathBuf,
    errors: Vec<ConfigError>,
}

impl ConfigErrors {
    /// The mistakes `errors`, at least one, found in `file`.
    pub(crate) fn new(file: &Path, errors: Vec<ConfigError>) -> ConfigErrors {
        debug_assert!(!errors.is_empty(), "a file is refused for at least one mistake");
        ConfigErrors { file: file.to_owned(), errors }
    }

    /// The file, as it was given.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The mistakes, in the order of the file (those without a line last).
    pub fn errors(&self) -> &[ConfigError] {
        &self.errors
    }

    /// The one mistake when the file cannot be read: nothing else can be said of it.
    fn unreadable(&self) -> Option<&ConfigError> {
        match self.errors.as_slice() {
            [read @ ConfigError::Read { .. }] => Some(read),
            _ => None,
        }
    }
}

impl fmt::Display for ConfigErrors {
    /// One mistake a line, then `system.yaml: 3 mistakes` (no count for a file that cannot be
    /// read).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(read) = self.unreadable() {
            return write!(f, "{read}");
        }
        for error in &self.errors {
            writeln!(f, "{error}")?;
        }
        let count = self.errors.len();
        write!(f, "{}: {count} {}", self.file.display(), if count == 1 { "mistake" } else { "mistakes" })
    }
}

impl std::error::Error for ConfigErrors {
    /// Why a file cannot be read; a mistake in the text has nothing behind it.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.unreadable().and_then(std::error::Error::source)
    }
}
