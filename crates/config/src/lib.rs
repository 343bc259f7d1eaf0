//! The system file: one YAML file that describes a whole Tessera system.
//!
//! A [`SystemConfig`] has one section per unit: the run ([`RunSection`]), the emulated trigger
//! ([`TriggerSection`]), the event manager ([`EvmParams`]), the list of readout units
//! ([`RuSection`]) and builder units ([`BuSection`]), and the tuning that all RUs
//! ([`RuParams`]) and all BUs ([`BuParams`]) share. Every key except the unit lists, the unit
//! names and each RU's FEDs has a default, and units are in the key names (`fragment_timeout_ms`).
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
//! The filter unit's selection [`Menu`] is a YAML file of its own, read the same way with the
//! same kind of errors ([`Menu::load`]); [`FileKind::of`] tells the two apart.

#![warn(missing_docs)]

pub mod emulation;
mod error;
pub mod fed_list;
mod locate;
pub mod menu;
mod system;
mod validate;
mod yaml;

pub use error::{ConfigError, ConfigErrors, Place, ValidationError};
pub use fed_list::{FedListError, format_fed_list, parse_fed_list};
pub use menu::{BxRange, ByteRange, Conditions, FedSizeRange, MAX_MENU_STREAMS, Menu, MenuPath};
pub use system::{
    BuParams, BuSection, ControllerSection, CorruptStreamPolicy, DEFAULT_HOST, DEFAULT_RATE_HZ, DEFAULT_RUN_SECONDS,
    EvmParams, FragmentSize, FuParams, FuProcess, LEVEL1_RATE_HZ, RuParams, RuParamsOverride, RuSection, RunSection,
    SystemConfig, TriggerSection,
};
pub use validate::{Advice, MAX_FU_PROCESSES_PER_BU, MAX_RUN_NUMBER, MAX_WRITER_THREADS};

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

/// What a configuration file holds: a system or a selection menu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A system file, read with [`SystemConfig::load`].
    System,
    /// A selection menu, read with [`Menu::load`].
    Menu,
}

impl FileKind {
    /// A menu when the top-level keys of `text` include one of a menu's (`streams`, `paths`)
    /// and none of a system's; a system otherwise, also when `text` is not YAML (reading it as
    /// a system then says why).
    ///
    /// ```
    /// use tessera_config::FileKind;
    /// assert_eq!(FileKind::of("streams: [A]\npaths: []\n"), FileKind::Menu);
    /// assert_eq!(FileKind::of("stream: [A]\npaths: []\n"), FileKind::Menu);
    /// assert_eq!(FileKind::of("rus: []\npaths: []\n"), FileKind::System);
    /// assert_eq!(FileKind::of("[1, 2]"), FileKind::System);
    /// ```
    pub fn of(text: &str) -> FileKind {
        let Ok(keys) = locate::KeyMap::read(text) else { return FileKind::System };
        let (menu, system) = (yaml::keys_of::<Menu>(), yaml::keys_of::<SystemConfig>());
        let mut top = keys.top_level_keys();
        if top.clone().any(|key| menu.contains(&key)) && !top.any(|key| system.contains(&key)) {
            FileKind::Menu
        } else {
            FileKind::System
        }
    }

    /// What the file at `path` holds ([`FileKind::of`] its text); a system when it cannot be
    /// read (reading it as a system then says why).
    pub fn of_file(path: &Path) -> FileKind {
        std::fs::read_to_string(path).map_or(FileKind::System, |text| FileKind::of(&text))
    }
}
