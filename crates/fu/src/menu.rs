//! The filter unit's selection menu: named paths, each with a prescale and conditions on what
//! an event holds, each feeding one or more output streams.
//!
//! ```
//! use tessera_fu::menu::Menu;
//! let text = "streams: [Physics, Express]\n\
//!             paths:\n  - name: physics\n    streams: [Physics]\n    conditions: {trigger_type: [1]}\n\
//!             \x20 - name: express\n    streams: [Express]\n    prescale: 10\n";
//! let menu = Menu::from_yaml(text, "menu.yaml".as_ref()).unwrap();
//! assert_eq!(menu.paths[1].prescale, 10);
//! assert_eq!(menu.paths[1].conditions, Default::default());
//! ```
//!
//! An event goes to a path's streams when it passes all the path's [`Conditions`] and then its
//! prescale; the filter unit applies the menu (`tessera_fu::select`).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use tessera_config::yaml;
use tessera_config::{ConfigErrors, Problems, SystemConfig, ValidationError};
use tessera_formats::FormatError;
use tessera_formats::fed::{BX_PER_ORBIT, MAX_FED_ID, event_type};
use tessera_formats::names::validate_stream_name;

/// Most streams a menu may have (a filter unit keeps an event's streams in the bits of a word).
pub const MAX_MENU_STREAMS: usize = 63;
/// Largest trigger type: the FED header's event type field has 4 bits.
pub const MAX_TRIGGER_TYPE: u8 = 15;

/// A selection menu: the output streams and the paths that fill them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Menu {
    /// The output stream names, at least one and at most [`MAX_MENU_STREAMS`], unique, each
    /// non-empty ASCII alphanumeric (no `_`: it separates the parts of output file names).
    pub streams: Vec<String>,
    /// The paths, at least one, with unique names; an event goes to the streams of every path
    /// that accepts it.
    pub paths: Vec<MenuPath>,
}

/// One path of a [`Menu`]: the conditions an event must pass, a prescale, and the streams an
/// accepted event goes to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MenuPath {
    /// The path's name: non-empty and unique in the menu.
    pub name: String,
    /// The streams the path feeds, at least one, each one of the menu's `streams`.
    pub streams: Vec<String>,
    /// Keep 1 of every `prescale` events that pass the conditions, the first one included;
    /// 1 (the default) keeps them all and 0 disables the path.
    #[serde(default = "one")]
    pub prescale: u32,
    /// What an event must hold to pass, all of it; the default passes every event.
    #[serde(default, skip_serializing_if = "Conditions::is_always")]
    pub conditions: Conditions,
}

/// What an event must hold to pass a path: every condition given must hold, and an omitted one
/// always holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conditions {
    /// The event's trigger type (the event type in the FED header of its trigger fragment) is
    /// one of these; an event without a trigger fragment fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_type: Option<Vec<u8>>,
    /// The event's bunch crossing, from its trigger fragment, is in this range; an event
    /// without a trigger fragment fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bx: Option<BxRange>,
    /// FED source ids that must all have a fragment in the event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feds_present: Vec<u16>,
    /// FED source ids that must all be missing from the event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feds_absent: Vec<u16>,
    /// The size of one FED's fragment is in a range; an event without that FED fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fed_size_bytes: Option<FedSizeRange>,
    /// The event's size (the FRD payload, header excluded) is in this range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_size_bytes: Option<ByteRange>,
    /// A deterministic pseudo-random fraction of events, in 0..=1, drawn from the run, the
    /// event number and the path's name: the same event always gets the same draw on a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_fraction: Option<f64>,
}

/// An inclusive range of bunch crossings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BxRange {
    /// First bunch crossing in the range; default 0.
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub min: u16,
    /// Last bunch crossing in the range; default 3563, the last of an orbit.
    #[serde(default = "last_bx", skip_serializing_if = "is_last_bx")]
    pub max: u16,
}

/// An inclusive range of sizes in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ByteRange {
    /// Smallest size in bytes; default 0.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub min: u64,
    /// Largest size in bytes; default unlimited.
    #[serde(default = "unlimited", skip_serializing_if = "is_unlimited")]
    pub max: u64,
}

/// A FED and an inclusive range for the size of its fragment, FED header and trailer included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedSizeRange {
    /// The FED source id.
    pub fed: u16,
    /// Smallest fragment size in bytes; default 0.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub min: u64,
    /// Largest fragment size in bytes; default unlimited.
    #[serde(default = "unlimited", skip_serializing_if = "is_unlimited")]
    pub max: u64,
}

fn one() -> u32 {
    1
}
fn last_bx() -> u16 {
    BX_PER_ORBIT - 1
}
fn unlimited() -> u64 {
    u64::MAX
}
fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
fn is_last_bx(v: &u16) -> bool {
    *v == last_bx()
}
fn is_unlimited(v: &u64) -> bool {
    *v == u64::MAX
}

impl BxRange {
    /// Whether `bx` is in the range.
    pub fn contains(&self, bx: u16) -> bool {
        (self.min..=self.max).contains(&bx)
    }
}

impl ByteRange {
    /// Whether `bytes` is in the range.
    pub fn contains(&self, bytes: u64) -> bool {
        (self.min..=self.max).contains(&bytes)
    }
}

impl FedSizeRange {
    /// The size range, without the FED.
    pub fn range(&self) -> ByteRange {
        ByteRange { min: self.min, max: self.max }
    }
}

impl Conditions {
    /// Whether there is no condition, so that every event passes.
    pub fn is_always(&self) -> bool {
        *self == Conditions::default()
    }
}

impl Default for Menu {
    /// A menu for emulated runs, whose events all have trigger type 1 (physics) and bunch
    /// crossings spread over the orbit:
    ///
    /// * stream `Physics`, path `physics`: trigger type 1, half of the events at random;
    /// * stream `Express`, path `express`: 5 % of all events at random;
    /// * stream `Calibration`, paths `calibration` (trigger type 2) and `abort_gap` (bunch
    ///   crossings 3443–3563, the last 121 of the orbit, about 3.4 % of the events).
    fn default() -> Self {
        let path = |name: &str, stream: &str, conditions| MenuPath {
            name: name.to_owned(),
            streams: vec![stream.to_owned()],
            prescale: 1,
            conditions,
        };
        Menu {
            streams: ["Physics", "Express", "Calibration"].map(str::to_owned).to_vec(),
            paths: vec![
                path(
                    "physics",
                    "Physics",
                    Conditions {
                        trigger_type: Some(vec![event_type::PHYSICS]),
                        random_fraction: Some(0.5),
                        ..Conditions::default()
                    },
                ),
                path("express", "Express", Conditions { random_fraction: Some(0.05), ..Conditions::default() }),
                path(
                    "calibration",
                    "Calibration",
                    Conditions { trigger_type: Some(vec![event_type::CALIBRATION]), ..Conditions::default() },
                ),
                path(
                    "abort_gap",
                    "Calibration",
                    Conditions { bx: Some(BxRange { min: 3443, max: BX_PER_ORBIT - 1 }), ..Conditions::default() },
                ),
            ],
        }
    }
}

fn check_range(p: &mut Problems, key: &str, min: u64, max: u64) {
    if min > max {
        p.add(key, format!("min {min} is above max {max}: no event can pass"));
    }
}

fn check_fed(p: &mut Problems, key: &str, fed: u16) {
    if fed > MAX_FED_ID {
        p.add(key, format!("FED id {fed} is above {MAX_FED_ID}"));
    }
}

impl Menu {
    /// Reads a menu from `text`, the contents of the file `origin` (named in errors), and
    /// [validates](Menu::validate) it. Errors name the file, line, column and key path, as
    /// those of [`SystemConfig::from_yaml`] do, and every
    /// mistake is reported.
    pub fn from_yaml(text: &str, origin: &Path) -> Result<Menu, ConfigErrors> {
        yaml::read_yaml(text, origin, Menu::problems)
    }

    /// Reads and validates the menu file at `path`.
    pub fn load(path: &Path) -> Result<Menu, ConfigErrors> {
        Menu::from_yaml(&yaml::read_text(path)?, path)
    }

    /// The menu as YAML that [`Menu::from_yaml`] reads back to the same value.
    pub fn to_yaml(&self) -> String {
        // Plain strings, numbers, lists and maps: serialization cannot fail.
        serde_saphyr::to_string(self).expect("a Menu always serializes")
    }

    /// The index of stream `name` in `streams`, if it is one.
    pub fn stream_index(&self, name: &str) -> Option<usize> {
        self.streams.iter().position(|s| s == name)
    }

    /// Checks what the types alone do not: stream names, unique names, that each path feeds
    /// known streams, and that each condition can hold. The first problem, if any; see
    /// [`Menu::problems`] for all of them.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.problems().into_iter().next().map_or(Ok(()), Err)
    }

    /// Every problem [`Menu::validate`] looks for, at most one a key, in the order of the file.
    pub fn problems(&self) -> Vec<ValidationError> {
        let mut p = Problems::default();
        self.validate_streams(&mut p);
        if self.paths.is_empty() {
            p.add("paths", "no paths: the menu would reject every event");
        }
        let mut names = HashMap::new();
        for (i, path) in self.paths.iter().enumerate() {
            let key = format!("paths[{i}]");
            if path.name.is_empty() {
                p.add(format!("{key}.name"), "a path needs a non-empty name");
            } else if let Some(first) = names.insert(path.name.as_str(), i) {
                p.add(format!("{key}.name"), format!("path name {:?} is already used by paths[{first}]", path.name));
            }
            self.validate_path_streams(&mut p, &key, path);
            validate_conditions(&mut p, &format!("{key}.conditions"), &path.conditions);
        }
        p.into_vec()
    }

    fn validate_streams(&self, p: &mut Problems) {
        if self.streams.is_empty() {
            p.add("streams", "no streams: a menu needs at least one");
        }
        if self.streams.len() > MAX_MENU_STREAMS {
            p.add("streams", format!("{} streams; at most {MAX_MENU_STREAMS}", self.streams.len()));
        }
        for (i, stream) in self.streams.iter().enumerate() {
            if let Err(e) = validate_stream_name(stream) {
                let problem = match e {
                    FormatError::Name { problem, .. } => problem.to_owned(),
                    other => other.to_string(),
                };
                p.add(format!("streams[{i}]"), format!("{stream:?}: {problem} ('_' separates file name parts)"));
            } else if let Some(first) = self.streams[..i].iter().position(|s| s == stream) {
                p.add(format!("streams[{i}]"), format!("stream {stream:?} is already streams[{first}]"));
            }
        }
    }

    fn validate_path_streams(&self, p: &mut Problems, key: &str, path: &MenuPath) {
        if path.streams.is_empty() {
            p.add(format!("{key}.streams"), "a path must feed at least one stream");
        }
        for (j, stream) in path.streams.iter().enumerate() {
            let key = format!("{key}.streams[{j}]");
            // Without streams, that none is one of them is said once, of `streams`.
            if self.streams.is_empty() {
                break;
            }
            if self.stream_index(stream).is_none() {
                p.add(key, format!("stream {stream:?} is not in streams ({})", self.streams.join(", ")));
            } else if let Some(first) = path.streams[..j].iter().position(|s| s == stream) {
                p.add(key, format!("stream {stream:?} is already the path's streams[{first}]"));
            }
        }
    }
}

fn validate_conditions(p: &mut Problems, key: &str, c: &Conditions) {
    if let Some(types) = &c.trigger_type {
        if types.is_empty() {
            p.add(
                format!("{key}.trigger_type"),
                "an empty list passes no event; leave the key out to pass every trigger type",
            );
        }
        for (i, &t) in types.iter().enumerate() {
            if t > MAX_TRIGGER_TYPE {
                p.add(
                    format!("{key}.trigger_type[{i}]"),
                    format!("trigger type {t} is above {MAX_TRIGGER_TYPE} (4 bits)"),
                );
            }
        }
    }
    if let Some(bx) = c.bx {
        check_range(p, &format!("{key}.bx"), bx.min.into(), bx.max.into());
        if bx.min >= BX_PER_ORBIT {
            p.add(
                format!("{key}.bx.min"),
                format!("{} is past the last bunch crossing of an orbit ({})", bx.min, BX_PER_ORBIT - 1),
            );
        }
    }
    for (i, &fed) in c.feds_present.iter().enumerate() {
        check_fed(p, &format!("{key}.feds_present[{i}]"), fed);
    }
    for (i, &fed) in c.feds_absent.iter().enumerate() {
        let at = format!("{key}.feds_absent[{i}]");
        check_fed(p, &at, fed);
        if c.feds_present.contains(&fed) {
            p.add(at, format!("FED {fed} is also in feds_present: no event can pass"));
        }
    }
    if let Some(size) = c.fed_size_bytes {
        check_fed(p, &format!("{key}.fed_size_bytes.fed"), size.fed);
        check_range(p, &format!("{key}.fed_size_bytes"), size.min, size.max);
        if c.feds_absent.contains(&size.fed) {
            p.add(
                format!("{key}.fed_size_bytes.fed"),
                format!("FED {} is also in feds_absent: no event can pass", size.fed),
            );
        }
    }
    if let Some(size) = c.event_size_bytes {
        check_range(p, &format!("{key}.event_size_bytes"), size.min, size.max);
    }
    if let Some(f) = c.random_fraction
        && !(0.0..=1.0).contains(&f)
    {
        p.add(format!("{key}.random_fraction"), format!("{f} is outside 0..=1"));
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
    /// use tessera_fu::menu::FileKind;
    /// assert_eq!(FileKind::of("streams: [A]\npaths: []\n"), FileKind::Menu);
    /// assert_eq!(FileKind::of("stream: [A]\npaths: []\n"), FileKind::Menu);
    /// assert_eq!(FileKind::of("rus: []\npaths: []\n"), FileKind::System);
    /// assert_eq!(FileKind::of("[1, 2]"), FileKind::System);
    /// ```
    pub fn of(text: &str) -> FileKind {
        let (menu, system) = (yaml::keys_of::<Menu>(), yaml::keys_of::<SystemConfig>());
        let top = yaml::top_level_keys(text);
        if top.iter().any(|key| menu.contains(&key.as_str())) && !top.iter().any(|key| system.contains(&key.as_str())) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_the_keys_of_a_menu() {
        assert_eq!(yaml::keys_of::<Menu>(), ["streams", "paths"]);
    }
}
