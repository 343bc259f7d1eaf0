//! The system file: one YAML file that describes a whole Tessera system.
//!
//! A [`SystemConfig`] has one section per unit: the run ([`RunSection`]), the emulated trigger
//! ([`TriggerSection`]), the event manager ([`EvmParams`]), the list of readout units
//! ([`RuSection`]) and builder units ([`BuSection`]), and the tuning that all RUs
//! ([`RuParams`]) and all BUs ([`BuParams`]) share. Every key except the unit lists, the unit
//! names and each RU's FEDs has a default, and units are in the key names (`connect_timeout_s`).
//!
//! [`SystemConfig::load`] reads and checks a file. Its mistakes come back together as
//! [`ConfigErrors`], each a [`ConfigError`] that names the file, the line and column where
//! known, the key path (`rus[1].feds`) and what was expected, for syntax errors, unknown keys
//! (with the nearest allowed name), wrong types and the semantic checks of
//! [`SystemConfig::problems`] alike.
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
//!
//! The filter unit's selection menu is a YAML file of its own, parsed in `tessera_fu::menu` with
//! this crate's reader ([`yaml::read_yaml`]) and the same kind of errors.

#![warn(missing_docs)]

pub mod emulation;
mod error;
pub mod fed_list;
mod locate;
mod system;
mod validate;
pub mod yaml;

pub use error::{ConfigError, ConfigErrors, Place, ValidationError};
pub use fed_list::{FedListError, format_fed_list, parse_fed_list};
pub use system::{
    BuParams, BuSection, ControllerSection, CorruptStreamPolicy, DEFAULT_HOST, DEFAULT_RATE_HZ, DEFAULT_RUN_SECONDS,
    EvmParams, FragmentSize, FuParams, FuProcess, LEVEL1_RATE_HZ, LinkClass, Protocol, PushParams, RuParams,
    RuParamsOverride, RuSection, RunMode, RunSection, SystemConfig, Transport, TransportSection, TriggerSection,
};
pub use validate::{Advice, MAX_FU_PROCESSES_PER_BU, MAX_RUN_NUMBER, MAX_WRITER_THREADS, Problems};

use std::path::Path;

impl SystemConfig {
    /// Reads a system from `text`, the contents of the file `origin` (named in errors), and
    /// [validates](SystemConfig::problems) it, reporting every mistake.
    ///
    /// A validation error is placed at the line of the key it names; a key left at its default
    /// is not in the text, so the line is that of its nearest written ancestor (`ru` for
    /// `ru.chunk_bytes`), or unknown when there is none.
    pub fn from_yaml(text: &str, origin: &Path) -> Result<SystemConfig, ConfigErrors> {
        yaml::read_yaml(text, origin, SystemConfig::problems)
    }

    /// Reads and validates the system file at `path`.
    pub fn load(path: &Path) -> Result<SystemConfig, ConfigErrors> {
        SystemConfig::from_yaml(&yaml::read_text(path)?, path)
    }

    /// The system as YAML that [`SystemConfig::from_yaml`] reads back to the same value, every
    /// key written out: `SystemConfig::default().to_yaml()` is a complete starting file.
    pub fn to_yaml(&self) -> String {
        // Every field is a plain number, string, list or map, so serialization cannot fail; a
        // failure would be a bug in this crate.
        serde_saphyr::to_string(self).expect("a SystemConfig always serializes")
    }
}
