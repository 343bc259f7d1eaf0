//! The selection menu: the default, the example file, and the errors that must point at the
//! problem.

use std::path::{Path, PathBuf};
use tessera_config::ConfigErrors;
use tessera_fu::menu::{BxRange, ByteRange, FedSizeRange, FileKind, Menu};

/// A valid menu; the negative tests change one thing in it. Lines: 1 `streams:`, 2 `paths:`,
/// 3 `- name: physics`, 4 its streams, 5 its prescale, 6 `conditions:`, 7 trigger_type, 8 bx,
/// 9 `- name: express`, 10 its streams, 11 its conditions.
const BASE: &str = "\
streams: [Physics, Express]
paths:
  - name: physics
    streams: [Physics]
    prescale: 1
    conditions:
      trigger_type: [1]
      bx: {min: 1, max: 3563}
  - name: express
    streams: [Express, Physics]
    conditions: {random_fraction: 0.05}
";

fn parse(text: &str) -> Result<Menu, ConfigErrors> {
    Menu::from_yaml(text, Path::new("menu.yaml"))
}

/// Every mistake found in `text`, one a line, in the order of the file.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(menu) => panic!("accepted:\n{text}\nas {menu:?}"),
        Err(e) => e.errors().iter().map(ToString::to_string).collect(),
    }
}

/// The one mistake in `text`.
fn error(text: &str) -> String {
    match errors(text).as_slice() {
        [one] => one.clone(),
        more => panic!("{} mistakes, not one: {more:#?}", more.len()),
    }
}

/// `BASE` with `from` replaced by `to`, which must be there.
fn changed(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "{from:?} is not in the base menu");
    BASE.replacen(from, to, 1)
}

#[test]
fn the_base_text_is_valid() {
    let menu = parse(BASE).unwrap();
    assert_eq!(menu.streams, ["Physics", "Express"]);
    assert_eq!(menu.paths[0].conditions.bx, Some(BxRange { min: 1, max: 3563 }));
    assert_eq!(menu.paths[1].prescale, 1, "the default prescale");
    assert_eq!(menu.paths[1].conditions.random_fraction, Some(0.05));
    assert_eq!(menu.stream_index("Express"), Some(1));
    assert_eq!(parse(&menu.to_yaml()).unwrap(), menu);
}

#[test]
fn default_is_valid_and_round_trips() {
    let menu = Menu::default();
    menu.validate().unwrap();
    assert_eq!(menu.streams, ["Physics", "Express", "Calibration"]);
    let yaml = menu.to_yaml();
    assert_eq!(parse(&yaml).unwrap(), menu, "{yaml}");
}

#[test]
fn example_file_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/menu.yaml");
    let menu = Menu::load(&path).unwrap();
    let physics = &menu.paths[0].conditions;
    assert_eq!(physics.fed_size_bytes, Some(FedSizeRange { fed: 3, min: 0, max: 4096 }));
    assert_eq!(physics.event_size_bytes, Some(ByteRange { min: 0, max: 1_000_000 }));
    assert_eq!((physics.feds_present.as_slice(), physics.feds_absent.as_slice()), ([0, 1].as_slice(), [5].as_slice()));
    assert_eq!(menu.paths[1].streams, ["Express", "Physics"]);
    assert_eq!(parse(&menu.to_yaml()).unwrap(), menu);
}

#[test]
fn range_bounds_have_defaults() {
    let menu =
        parse(&changed("bx: {min: 1, max: 3563}", "bx: {min: 3000}\n      event_size_bytes: {max: 10}")).unwrap();
    assert_eq!(menu.paths[0].conditions.bx, Some(BxRange { min: 3000, max: 3563 }));
    assert_eq!(menu.paths[0].conditions.event_size_bytes, Some(ByteRange { min: 0, max: 10 }));
    assert_eq!(parse(&menu.to_yaml()).unwrap(), menu);
}

#[test]
fn missing_file_is_named() {
    let e = Menu::load(&PathBuf::from("/nonexistent/menu.yaml")).unwrap_err();
    assert_eq!(e.to_string(), "/nonexistent/menu.yaml: cannot read it: No such file or directory (os error 2)");
}

#[test]
fn unknown_key_names_the_line_path_and_the_keys_allowed() {
    assert_eq!(
        error(&changed("    prescale: 1", "    prescal: 1")),
        "menu.yaml:5:5: paths[0].prescal: unknown field `prescal`, expected one of name, streams, prescale, conditions; \
         did you mean `prescale`?"
    );
    // No allowed key is near enough to `bunch` to be meant.
    assert_eq!(
        error(&changed("      bx:", "      bunch:")),
        "menu.yaml:8:7: paths[0].conditions.bunch: unknown field `bunch`, expected one of trigger_type, bx, \
         feds_present, feds_absent, fed_size_bytes, event_size_bytes, random_fraction"
    );
}

#[test]
fn unknown_stream_in_a_path_is_named() {
    assert_eq!(
        error(&changed("streams: [Express, Physics]", "streams:\n      - Express\n      - Phys")),
        "menu.yaml:12:9: paths[1].streams[1]: stream \"Phys\" is not in streams (Physics, Express)"
    );
    assert_eq!(
        error(&changed("streams: [Physics]", "streams: [Phys]")),
        "menu.yaml:4:15: paths[0].streams[0]: stream \"Phys\" is not in streams (Physics, Express)"
    );
}

#[test]
fn duplicate_path_name_is_refused_at_the_second() {
    assert_eq!(
        error(&changed("name: express", "name: physics")),
        "menu.yaml:9:5: paths[1].name: path name \"physics\" is already used by paths[0]"
    );
}

#[test]
fn stream_name_with_underscore_is_refused() {
    let text = BASE.replace("Express", "Express_1");
    assert_eq!(
        error(&text),
        "menu.yaml:1:20: streams[1]: \"Express_1\": stream name must be non-empty ASCII alphanumeric ('_' separates \
         file name parts)"
    );
}

#[test]
fn random_fraction_must_be_a_fraction() {
    assert_eq!(
        error(&changed("random_fraction: 0.05", "random_fraction: 1.5")),
        "menu.yaml:11:18: paths[1].conditions.random_fraction: 1.5 is outside 0..=1"
    );
}

#[test]
fn range_min_above_max_is_refused() {
    assert_eq!(
        error(&changed("bx: {min: 1, max: 3563}", "bx: {min: 30, max: 20}")),
        "menu.yaml:8:7: paths[0].conditions.bx: min 30 is above max 20: no event can pass"
    );
    let text = changed("bx: {min: 1, max: 3563}", "fed_size_bytes:\n        fed: 3\n        min: 9\n        max: 8");
    assert_eq!(
        error(&text),
        "menu.yaml:8:7: paths[0].conditions.fed_size_bytes: min 9 is above max 8: no event can pass"
    );
}

#[test]
fn empty_streams_are_refused() {
    assert_eq!(
        error(&changed("streams: [Physics, Express]\n", "streams: []\n")),
        "menu.yaml:1:1: streams: no streams: a menu needs at least one"
    );
    assert_eq!(
        error(&changed("streams: [Physics]", "streams: []")),
        "menu.yaml:4:5: paths[0].streams: a path must feed at least one stream"
    );
}

#[test]
fn duplicate_stream_is_refused_at_the_second() {
    assert_eq!(
        error(&changed("streams: [Physics, Express]\n", "streams:\n  - Physics\n  - Express\n  - Physics\n")),
        "menu.yaml:4:5: streams[2]: stream \"Physics\" is already streams[0]"
    );
    assert_eq!(
        error(&changed("streams: [Express, Physics]", "streams: [Express, Express]")),
        "menu.yaml:10:24: paths[1].streams[1]: stream \"Express\" is already the path's streams[0]"
    );
}

#[test]
fn impossible_conditions_are_refused() {
    assert_eq!(
        error(&changed("trigger_type: [1]", "trigger_type: []")),
        "menu.yaml:7:7: paths[0].conditions.trigger_type: an empty list passes no event; leave the key out to pass \
         every trigger type"
    );
    assert_eq!(
        error(&changed("trigger_type: [1]", "trigger_type: [1, 16]")),
        "menu.yaml:7:25: paths[0].conditions.trigger_type[1]: trigger type 16 is above 15 (4 bits)"
    );
    assert_eq!(
        error(&changed("trigger_type: [1]", "feds_present: [3]\n      feds_absent: [4, 3]")),
        "menu.yaml:8:24: paths[0].conditions.feds_absent[1]: FED 3 is also in feds_present: no event can pass"
    );
    assert_eq!(
        error(&changed("trigger_type: [1]", "feds_present: [4096]")),
        "menu.yaml:7:22: paths[0].conditions.feds_present[0]: FED id 4096 is above 4095"
    );
    assert_eq!(
        error(&changed("bx: {min: 1, max: 3563}", "bx: {min: 3564, max: 4000}")),
        "menu.yaml:8:12: paths[0].conditions.bx.min: 3564 is past the last bunch crossing of an orbit (3563)"
    );
}

#[test]
fn wrong_type_and_missing_key_are_named() {
    assert_eq!(
        error(&changed("prescale: 1", "prescale: -1")),
        "menu.yaml:5:15: paths[0].prescale: expected a whole number of 0 or more (u32), found \"-1\""
    );
    assert_eq!(error(&changed("  - name: express\n", "  - \n")), "menu.yaml:10:5: paths[1]: missing field `name`");
    assert_eq!(error("streams: [A]\n"), "menu.yaml:1:1: missing field `paths`");
    assert_eq!(
        error(&changed("bx: {min: 1, max: 3563}", "fed_size_bytes: {min: 3}")),
        "menu.yaml:8:7: paths[0].conditions.fed_size_bytes: missing field `fed`"
    );
    assert_eq!(error("streams: [A]\npaths: []\n"), "menu.yaml:2:1: paths: no paths: the menu would reject every event");
}

#[test]
fn every_mistake_of_a_menu_is_reported() {
    let text = BASE
        .replace("prescale: 1", "prescale: -1")
        .replace("trigger_type: [1]", "trigger_typ: [1]")
        .replace("bx: {min: 1, max: 3563}", "bx: {min: 3563, max: 1}")
        .replace("random_fraction: 0.05", "random_fraction: 1.5");
    assert_eq!(
        errors(&text),
        [
            "menu.yaml:5:15: paths[0].prescale: expected a whole number of 0 or more (u32), found \"-1\"",
            "menu.yaml:7:7: paths[0].conditions.trigger_typ: unknown field `trigger_typ`, expected one of \
             trigger_type, bx, feds_present, feds_absent, fed_size_bytes, event_size_bytes, random_fraction; did you \
             mean `trigger_type`?",
            "menu.yaml:8:7: paths[0].conditions.bx: min 3563 is above max 1: no event can pass",
            "menu.yaml:11:18: paths[1].conditions.random_fraction: 1.5 is outside 0..=1",
        ]
    );
    assert!(parse(&text).unwrap_err().to_string().ends_with("\nmenu.yaml: 4 mistakes"));
}

#[test]
fn a_menu_is_told_from_a_system_by_its_keys() {
    assert_eq!(FileKind::of(BASE), FileKind::Menu);
    assert_eq!(FileKind::of(&BASE.replace("streams: [Physics, Express]", "streamz: [Physics]")), FileKind::Menu);
    assert_eq!(FileKind::of(&format!("{BASE}rus: []\n")), FileKind::System);
    assert_eq!(FileKind::of("rus:\n  - {name: ru0, feds: 1024}\nbus: [{name: bu0}]\n"), FileKind::System);
    assert_eq!(FileKind::of("not: [yaml"), FileKind::System);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    assert_eq!(FileKind::of_file(&example.join("menu.yaml")), FileKind::Menu);
    assert_eq!(FileKind::of_file(&example.join("laptop-2x2.yaml")), FileKind::System);
    assert_eq!(FileKind::of_file(&example.join("no-such-file.yaml")), FileKind::System);
}
