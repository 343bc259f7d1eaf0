//! The system file: one YAML file that describes a whole Tessera system.
//!
//! A [`SystemConfig`] has one section per unit: the run ([`RunSection`]), the emulated trigger
//! ([`TriggerSection`]), the event manager ([`EvmParams`]), the list of readout units
//! ([`RuSection`]) and builder units ([`BuSection`]), and the tuning that all RUs
//! ([`RuParams`]) and all BUs ([`BuParams`]) share. Every key except the unit lists, the unit
//! names and each RU's FEDs has a default, and units are in the key names (`fragment_timeout_ms`).
//!
//! [`SystemConfig::load`] reads and checks a file. Any problem comes back as a [`ConfigError`]
//! that names the file, the line and column where known, the key path (`rus[1].feds`) and what
//! was expected, for syntax errors, unknown keys, wrong types and the semantic checks of
//! [`SystemConfig::validate`] alike.
//!
//! ```
//! use tessera_config::SystemConfig;
//! let text = "rus:\n  - {name: ru0, feds: \"1024,0-3\"}\nbus:\n  - {name: bu0}\n";
//! let system = SystemConfig::from_yaml(text, "system.yaml".as_ref()).unwrap();
//! assert_eq!(system.all_feds(), [1024, 0, 1, 2, 3]);
//! assert_eq!(system.run.seconds, Some(10.0));
//! ```
//!
//! FED lists use the command line's syntax; [`parse_fed_list`] reads them for both.

#![warn(missing_docs)]

mod error;
pub mod fed_list;
mod locate;
mod system;
mod validate;

pub use error::{ConfigError, Place, ValidationError};
pub use fed_list::{FedListError, format_fed_list, parse_fed_list};
pub use system::{
    BuParams, BuSection, CorruptStreamPolicy, DEFAULT_HOST, DEFAULT_RATE_HZ, DEFAULT_RUN_SECONDS, EvmParams,
    FragmentSize, RuParams, RuParamsOverride, RuSection, RunSection, SystemConfig, TriggerSection,
};
pub use validate::{MAX_RUN_NUMBER, MAX_WRITER_THREADS};

use locate::{KeyMap, known};
use serde_saphyr::MessageFormatter as _;
use std::path::Path;

impl SystemConfig {
    /// Reads a system from `text`, the contents of the file `origin` (named in errors), and
    /// [validates](SystemConfig::validate) it.
    ///
    /// A validation error is placed at the line of the key it names; a key left at its default
    /// is not in the text, so the line is that of its nearest written ancestor (`ru` for
    /// `ru.chunk_bytes`), or unknown when there is none.
    pub fn from_yaml(text: &str, origin: &Path) -> Result<SystemConfig, ConfigError> {
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
        let system: SystemConfig = serde_saphyr::from_str(text).map_err(|e| {
            let at = error_position(&e);
            let message = message(&e);
            // serde words it "unknown field `NAME`, expected ...".
            let unknown =
                message.strip_prefix("unknown field `").and_then(|rest| rest.split_once('`')).map(|(name, _)| name);
            let key = at.and_then(|at| keys.path_at(at, unknown)).map(str::to_owned);
            ConfigError::Schema { place: place(at, key), message }
        })?;
        system.validate().map_err(|e| {
            // Validation knows the key, not the place; the key map finds the line where the key,
            // or its nearest written ancestor, is.
            let at = keys.position_of(&e.key);
            ConfigError::Invalid { place: place(at, Some(e.key)), message: e.message }
        })?;
        Ok(system)
    }

    /// Reads and validates the system file at `path`.
    pub fn load(path: &Path) -> Result<SystemConfig, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { file: path.to_owned(), source })?;
        SystemConfig::from_yaml(&text, path)
    }

    /// The system as YAML that [`SystemConfig::from_yaml`] reads back to the same value, every
    /// key written out: `SystemConfig::default().to_yaml()` is a complete starting file.
    pub fn to_yaml(&self) -> String {
        // Every field is a plain number, string, list or map, so serialization cannot fail; a
        // failure would be a bug in this crate.
        serde_saphyr::to_string(self).expect("a SystemConfig always serializes")
    }
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
