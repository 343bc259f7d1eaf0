//! The system file: defaults, the example files, and the errors that must point at the problem.

use std::path::{Path, PathBuf};
use tessera_config::emulation::SizeModel;
use tessera_config::{ConfigError, ConfigErrors, CorruptStreamPolicy, FragmentSize, SystemConfig};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

/// A valid system, two RUs and one BU; the negative tests change one thing in it.
/// Lines: 1 `rus:`, 2 `- name: ru0`, 3 its feds, 4 `- name: ru1`, 5 its feds, 6 `bus:`, 7 `- name: bu0`.
const BASE: &str = "rus:\n  - name: ru0\n    feds: \"1024,0-3\"\n  - name: ru1\n    feds: 4-7\nbus:\n  - name: bu0\n";

fn parse(text: &str) -> Result<SystemConfig, ConfigErrors> {
    SystemConfig::from_yaml(text, Path::new("conf/bad.yaml"))
}

/// Every mistake found in `text`, one a line, in the order of the file.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(system) => panic!("accepted:\n{text}\nas {system:?}"),
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

#[test]
fn the_base_text_is_valid() {
    let system = parse(BASE).unwrap();
    assert_eq!(system.all_feds(), [1024, 0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(system.bus.len(), 1);
}

#[test]
fn default_is_the_laptop_system_and_round_trips() {
    let system = SystemConfig::default();
    system.validate().unwrap();
    assert_eq!(system.rus.len(), 2);
    assert_eq!(system.bus.len(), 2);
    assert_eq!(system.all_feds(), [1024, 0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(system.run.seconds, Some(10.0));
    assert_eq!(system.trigger.paced_rate_hz(), Some(20_000.0));
    let yaml = system.to_yaml();
    assert!(yaml.contains("feds: 1024,0-3"), "{yaml}");
    assert_eq!(parse(&yaml).unwrap(), system);
}

#[test]
fn laptop_example_parses_with_defaults_filled_in() {
    let system = SystemConfig::load(&example("laptop-2x2.yaml")).unwrap();
    assert_eq!(system.rus[0].fragment_size, FragmentSize::LogNormal { mean_bytes: 2048.0, sigma_bytes: 512.0 });
    assert_eq!(system.rus[1].fragment_size.model(), SizeModel::Fixed(4096));
    assert_eq!(system.ru_params(1).chunk_bytes, 2 << 20);
    assert_eq!(system.bu_directory(1, Path::new("/tmp/out")), Path::new("/tmp/out/bu1"));
    assert!(system.rus.iter().all(|ru| ru.emulated && ru.host == "127.0.0.1"));
    // Apart from ru1's fixed size, the example spells out the defaults.
    let mut expected = SystemConfig::default();
    expected.rus[1].fragment_size = FragmentSize::Fixed { bytes: 4096 };
    assert_eq!(system, expected);
}

#[test]
fn two_hosts_example_is_refused_until_its_placeholders_are_replaced() {
    let path = example("two-hosts.yaml");
    let refused = SystemConfig::load(&path).unwrap_err();
    let keys: Vec<_> = refused.errors().iter().map(|e| e.place().unwrap().key.clone().unwrap()).collect();
    assert_eq!(keys, ["rus[0].host", "rus[1].host", "bus[0].host", "bus[1].host"], "{refused}");
    assert!(
        refused.errors()[1]
            .to_string()
            .ends_with("rus[1].host: \"host-b.example\" is a placeholder: put your hosts' names here"),
        "{refused}"
    );
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("host-a.example", "10.0.0.1")
        .replace("host-b.example", "10.0.0.2");
    let system = SystemConfig::from_yaml(&text, &path).unwrap();
    assert_eq!((system.run.events, system.run.seconds), (Some(1_000_000), None));
    assert_eq!(system.rus[1].host, "10.0.0.2");
    assert_eq!(system.rus[1].fault_specs().unwrap()[0].fed, Some(9));
    assert_eq!(system.ru_params(1).connect_timeout_s, 300);
    assert_eq!(system.ru_params(0).connect_timeout_s, 60);
    assert_eq!(system.ru_params(1).silent_fed_give_up_ms, None, "a silent FED is never given up by default");
    assert_eq!(system.ru_params(1).on_corrupt_stream, CorruptStreamPolicy::Continue);
    assert_eq!(system.bu_directory(0, Path::new("/data/tessera")), Path::new("/dev/shm/tessera"));
    assert_eq!(parse(&system.to_yaml()).unwrap(), system);
}

#[test]
fn stop_condition_defaults_to_ten_seconds_only_without_an_event_count() {
    let events_only = format!("run:\n  events: 500\n{BASE}");
    assert_eq!(parse(&events_only).unwrap().run.seconds, None);
    assert_eq!(parse(BASE).unwrap().run.seconds, Some(10.0));
    let both = format!("run:\n  events: 500\n  seconds: 2.5\n{BASE}");
    assert_eq!(parse(&both).unwrap().run.seconds, Some(2.5));
}

#[test]
fn a_single_fed_may_be_a_yaml_number() {
    let system = parse(&BASE.replace("feds: 4-7", "feds: 4")).unwrap();
    assert_eq!(system.rus[1].feds, [4]);
}

#[test]
fn unknown_key_names_the_file_line_path_and_the_keys_allowed() {
    assert_eq!(
        error(&BASE.replace("    feds: \"1024,0-3\"", "    fedz: \"1024,0-3\"")),
        "conf/bad.yaml:3:5: rus[0].fedz: unknown field `fedz`, expected one of name, host, ferol_port, control_port, \
         feds, fragment_size, faults, emulated, send_rate_percent, params, cpu; did you mean `feds`?"
    );
}

#[test]
fn unknown_key_on_the_first_line_is_named_too() {
    assert_eq!(
        error(&format!("defaults: {{}}\n{BASE}")),
        "conf/bad.yaml:1:1: defaults: unknown field `defaults`, expected one of run, trigger, evm, push, rus, bus, ru, bu, fu, controller, transport"
    );
}

#[test]
fn wrong_type_names_the_line_path_and_type() {
    let text = format!("{BASE}ru:\n  chunks_per_fed: many\n");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:9:19: ru.chunks_per_fed: expected a whole number of 0 or more (u32), found \"many\""
    );
}

#[test]
fn missing_required_key_names_the_unit() {
    let msg = error("rus:\n  - name: ru0\nbus:\n  - name: bu0\n");
    assert_eq!(msg, "conf/bad.yaml:2:5: rus[0]: missing field `feds`");
    // The parser notices at the mapping's last key; the error still names the mapping.
    let msg = error("rus:\n  - name: ru0\n    host: h\nbus:\n  - name: bu0\n");
    assert_eq!(msg, "conf/bad.yaml:2:5: rus[0]: missing field `feds`");
    assert_eq!(error("rus:\n  - {name: ru0, feds: 1024}\n"), "conf/bad.yaml:1:1: missing field `bus`");
}

#[test]
fn fed_read_by_two_rus_is_refused_at_the_second() {
    assert_eq!(
        error(&BASE.replace("feds: 4-7", "feds: 3-7")),
        "conf/bad.yaml:5:5: rus[1].feds: FED 3 is already read by rus[0]"
    );
}

#[test]
fn trigger_fed_belongs_on_rus_0_only() {
    assert_eq!(
        error(&BASE.replace("feds: 4-7", "feds: 4-7,1024").replace("\"1024,0-3\"", "0-3")),
        "conf/bad.yaml:3:5: rus[0].feds: rus[0] hosts the EVM and must read the trigger FED 1024"
    );
    assert_eq!(
        error(&BASE.replace("feds: 4-7", "feds: 4-7,1024")),
        "conf/bad.yaml:5:5: rus[1].feds: FED 1024 is already read by rus[0]"
    );
    assert_eq!(
        error(&BASE.replace("feds: 4-7", "feds: \"1024,4-7\"").replace("\"1024,0-3\"", "0-3")),
        "conf/bad.yaml:3:5: rus[0].feds: rus[0] hosts the EVM and must read the trigger FED 1024"
    );
    let text = "rus:\n  - name: ru0\n    feds: 1024\n  - name: ru1\n    feds: \"0,1024\"\nbus:\n  - name: bu0\n";
    assert!(error(text).starts_with("conf/bad.yaml:5:5: rus[1].feds: FED 1024 is already read by rus[0]"));
}

#[test]
fn trigger_fed_on_rus_1_alone_is_refused_there() {
    // rus[0] keeps a trigger FED so that the check on rus[1] is the one that fires; 1024 on two
    // RUs is a duplicate first, so rus[1] gets another trigger id, refused by the emulator.
    assert_eq!(
        error(&BASE.replace("feds: 4-7", "feds: 4-7,1030")),
        "conf/bad.yaml:5:5: rus[1].feds: FED 1030: 1025..=1099 are trigger FED ids; the emulator's trigger is 1024"
    );
}

#[test]
fn bad_fed_list_names_the_item() {
    assert_eq!(
        error(&BASE.replace("feds: 4-7", "feds: 7-4")),
        "conf/bad.yaml:5:11: rus[1].feds: range 7-4 runs backwards"
    );
    assert_eq!(
        error(&BASE.replace("feds: 4-7", "feds: 4-5000")),
        "conf/bad.yaml:5:11: rus[1].feds: FED id 5000 is above 4095"
    );
}

#[test]
fn bad_fault_spec_names_its_index_and_reason() {
    let text = BASE.replace("feds: 4-7", "feds: 4-7\n    faults: [\"skip@3\", \"bogus@1\"]");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:6:24: rus[1].faults[1]: \"bogus@1\": unknown fault \"bogus\"; known: bad-crc, wrong-fed-id, \
         skip, truncate, garbage, disconnect, stall"
    );
    let text = BASE.replace("feds: 4-7", "feds: 4-7\n    faults:\n      - bad-crc@100/3");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:7:9: rus[1].faults[0]: \"bad-crc@100/3\" hits FED 3, which this RU does not read"
    );
}

#[test]
fn low_water_must_be_below_high_water() {
    let text = format!("{BASE}bu:\n  ramdisk_high_water_percent: 80\n  ramdisk_low_water_percent: 80\n");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:10:3: bu.ramdisk_low_water_percent: 80% must be below bu.ramdisk_high_water_percent (80%)"
    );
    let text = format!("{BASE}bu:\n  ramdisk_high_water_percent: 101\n");
    assert_eq!(error(&text), "conf/bad.yaml:9:3: bu.ramdisk_high_water_percent: 101% is above 100%");
}

#[test]
fn bus_that_discard_their_events_are_refused_with_a_filter_farm_or_a_file_broker() {
    let discard = format!("{BASE}bu:\n  discard_events: true\n");
    assert_eq!(
        error(&discard),
        "conf/bad.yaml:9:3: bu.discard_events: true while fu.enabled is true: the filter farm reads the BUs' files, \
         which BUs that discard their events never write; set fu.enabled: false, or bu.discard_events: false"
    );
    let no_farm = format!("{discard}fu:\n  enabled: false\n");
    assert!(parse(&no_farm).unwrap().bu.discard_events);
    assert!(!parse(BASE).unwrap().bu.discard_events, "BUs write their events unless told");
    let broker = no_farm.replace("  - name: bu0\n", "  - name: bu0\n    broker_port: 9400\n");
    assert_eq!(
        error(&broker),
        "conf/bad.yaml:8:5: bus[0].broker_port: a file broker serves the BU's files, and with bu.discard_events true \
         it writes none: remove bus[0].broker_port, or set bu.discard_events: false"
    );
}

#[test]
fn a_run_needs_a_stop_condition() {
    let text = format!("run:\n  number: 7\n  seconds: null\n{BASE}");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:3:3: run.seconds: null, and so is run.events: the run needs at least one stop condition"
    );
    assert_eq!(
        error(&format!("run:\n  seconds: .nan\n{BASE}")),
        "conf/bad.yaml:2:3: run.seconds: NaN is not a number of seconds > 0"
    );
}

#[test]
fn yaml_syntax_error_names_the_line() {
    let text = BASE.replace("    feds: 4-7", "    feds: [4-7");
    let e = parse(&text).unwrap_err();
    let [e] = e.errors() else { panic!("one syntax error: {e}") };
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
    let place = e.place().unwrap();
    assert_eq!((place.file.as_path(), place.key.as_deref()), (Path::new("conf/bad.yaml"), None));
    // The parser notices the missing `]` at the next entry of the outer mapping.
    assert_eq!(place.line, Some(6), "{e}");
    assert!(e.to_string().starts_with("conf/bad.yaml:6:"), "{e}");
    assert!(e.to_string().contains("not valid YAML"), "{e}");
}

#[test]
fn unit_names_are_unique_and_plain() {
    assert_eq!(
        error(&BASE.replace("name: bu0", "name: ru1")),
        "conf/bad.yaml:7:5: bus[0].name: \"ru1\" is already the name of rus[1]"
    );
    assert_eq!(
        error(&BASE.replace("name: bu0", "name: \"bu 0\"")),
        "conf/bad.yaml:7:5: bus[0].name: \"bu 0\" is not a name of letters, digits, `_` and `-`"
    );
}

#[test]
fn ports_are_unique_per_host_unless_zero() {
    let text = BASE
        .replace("name: ru1", "name: ru1\n    control_port: 9000")
        .replace("name: bu0", "name: bu0\n    data_port: 9000");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:9:5: bus[0].data_port: port 9000 on 127.0.0.1 is already taken by rus[1].control_port"
    );
    let other_host = text.replace("name: bu0", "name: bu0\n    host: 10.0.0.2");
    parse(&other_host).unwrap();
}

#[test]
fn chunks_must_hold_the_largest_fragment() {
    // rus[0] has log-normal sizes and so needs its own larger chunks; rus[1] uses the shared ones.
    let text = BASE
        .replace("\"1024,0-3\"", "\"1024,0-3\"\n    params: {chunk_bytes: 1052704}")
        .replace("feds: 4-7", "feds: 4-7\n    fragment_size: {bytes: 65536}")
        + "ru:\n  chunk_bytes: 65536\n";
    assert_eq!(
        error(&text),
        "conf/bad.yaml:11:3: ru.chunk_bytes: 65536 bytes cannot hold the largest fragment of rus[1] on the wire, \
         65808 bytes with FEROL block headers"
    );
    // Log-normal sizes are bounded only by the emulator's clamp.
    let text = BASE.to_owned() + "ru:\n  chunk_bytes: 1052703\n";
    assert!(error(&text).contains("1052704 bytes with FEROL block headers, as log-normal"), "{}", error(&text));
    let text = BASE.replace("feds: 4-7", "feds: 4-7\n    params: {chunks_per_fed: 1}");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:6:14: rus[1].params.chunks_per_fed: 1 is below 2: a stream needs a chunk to fill while another \
         is still in use"
    );
}

#[test]
fn fragment_size_takes_one_form() {
    let text = BASE.replace("feds: 4-7", "feds: 4-7\n    fragment_size: {bytes: 2048, sigma_bytes: 3}");
    assert_eq!(
        error(&text),
        "conf/bad.yaml:6:20: rus[1].fragment_size: expected either `bytes` or both `mean_bytes` and `sigma_bytes`"
    );
    let text = BASE.replace("feds: 4-7", "feds: 4-7\n    fragment_size: {bytes: 8}");
    assert_eq!(error(&text), "conf/bad.yaml:6:5: rus[1].fragment_size: 8 bytes is outside 16..=1048576");
}

#[test]
fn ranges_of_run_and_bu_numbers() {
    assert_eq!(error(&format!("run:\n  number: 0\n{BASE}")), "conf/bad.yaml:2:3: run.number: 0 is outside 1..=999999");
    assert_eq!(
        error(&format!("run:\n  orbits_per_lumi_section: 262145\n{BASE}")),
        "conf/bad.yaml:2:3: run.orbits_per_lumi_section: 262145 is outside 1..=262144"
    );
    assert_eq!(
        error(&format!("{BASE}bu:\n  writer_threads: 17\n")),
        "conf/bad.yaml:9:3: bu.writer_threads: 17 is outside 1..=16"
    );
    // A default that is not written is reported at its nearest written ancestor's line.
    assert_eq!(error("rus: []\nbus:\n  - name: bu0\n"), "conf/bad.yaml:1:1: rus: at least one RU is needed");
}

#[test]
fn an_unreadable_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.yaml");
    let e = SystemConfig::load(&missing).unwrap_err();
    assert_eq!(e.to_string(), format!("{}: cannot read it: No such file or directory (os error 2)", missing.display()));
    let written = dir.path().join("system.yaml");
    std::fs::write(&written, BASE.replace("name: bu0", "name: bu0\n    colour: red")).unwrap();
    let e = SystemConfig::load(&written).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:8:5: bus[0].colour: unknown field `colour`", written.display())), "{e}");
}

#[test]
fn the_lumi_section_time_out_must_outlast_a_lumi_section() {
    // 262144 orbits last 23.3 s: a 10 s time-out could close a section that triggers still fill.
    let text = format!("run:\n  orbits_per_lumi_section: 262144\n{BASE}evm:\n  lumi_section_timeout_s: 10\n");
    let message = error(&text);
    assert!(message.starts_with("conf/bad.yaml:"), "{message}");
    assert!(message.contains("evm.lumi_section_timeout_s: 10 s is shorter than a lumi section (23.311 s"), "{message}");
}

#[test]
fn every_mistake_is_reported_in_the_order_of_the_file() {
    let text = format!(
        "runn:\n  number: 2\ntrigger:\n  sede: 3\n  rate_hz: fast\n{BASE}bu:\n  writer_threads: 17\n  ramdisk_high_water_percent: lots\n"
    );
    assert_eq!(
        errors(&text),
        [
            "conf/bad.yaml:1:1: runn: unknown field `runn`, expected one of run, trigger, evm, push, rus, bus, ru, bu, fu, \
             controller, transport; did you mean `run`?",
            "conf/bad.yaml:4:3: trigger.sede: unknown field `sede`, expected one of rate_hz, free_running, seed; did \
             you mean `seed`?",
            "conf/bad.yaml:5:12: trigger.rate_hz: expected a number (f64), found \"fast\"",
            "conf/bad.yaml:14:3: bu.writer_threads: 17 is outside 1..=16",
            "conf/bad.yaml:15:31: bu.ramdisk_high_water_percent: expected a whole number of 0 or more (u8), found \"lots\"",
        ]
    );
    let e = parse(&text).unwrap_err();
    assert_eq!(e.file(), Path::new("conf/bad.yaml"));
    assert!(e.to_string().ends_with("\nconf/bad.yaml: 5 mistakes"), "{e}");
    assert_eq!(e.to_string().lines().count(), 6, "{e}");
}

#[test]
fn reading_goes_on_past_a_unit_that_cannot_be_read() {
    // rus[1]'s FED list cannot be read, so rus[1] is left out: the mistakes after it are still
    // found, and so is what is wrong beside the list of RUs, but not what depends on it (a
    // port of rus[2], which is then read as rus[1]).
    let text = BASE
        .replace("feds: 4-7", "feds: 4-\n    cpu: one\n  - name: ru2\n    feds: 8\n    ferol_port: 9200")
        .replace("name: bu0", "name: bu0\n    colour: red\n    data_port: 9200")
        + "run:\n  number: 0\n";
    assert_eq!(
        errors(&text),
        [
            "conf/bad.yaml:5:11: rus[1].feds: \"4-\": expected a FED id (0 to 4095) or a range such as 0-7",
            "conf/bad.yaml:6:10: rus[1].cpu: expected a whole number of 0 or more (u64), found \"one\"",
            "conf/bad.yaml:12:5: bus[0].colour: unknown field `colour`, expected one of name, host, data_port, \
             directory, cpu, broker_port, fu_host",
            "conf/bad.yaml:15:3: run.number: 0 is outside 1..=999999",
        ]
    );
}

#[test]
fn a_misspelt_key_is_not_also_reported_missing() {
    let text = "rus:\n  - name: ru0\n    fedz: 1024\nbus:\n  - nam: bu0\n";
    let found = errors(text);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("conf/bad.yaml:3:5: rus[0].fedz: unknown field `fedz`"), "{found:#?}");
    assert!(found[0].ends_with("did you mean `feds`?"), "{found:#?}");
    assert!(found[1].starts_with("conf/bad.yaml:5:5: bus[0].nam: unknown field `nam`"), "{found:#?}");
    assert!(found[1].ends_with("did you mean `name`?"), "{found:#?}");
    // A key that is missing with no misspelling of it in its place is reported.
    assert_eq!(
        errors("rus:\n  - name: ru0\n    colour: red\nbus:\n  - name: bu0\n"),
        [
            "conf/bad.yaml:2:5: rus[0]: missing field `feds`",
            "conf/bad.yaml:3:5: rus[0].colour: unknown field `colour`, expected one of name, host, ferol_port, \
             control_port, feds, fragment_size, faults, emulated, send_rate_percent, params, cpu",
        ]
    );
}

#[test]
fn placeholder_hosts_are_refused_at_every_key_that_names_a_host() {
    let text = "rus:\n  - {name: ru0, feds: 1024, host: ru-host.example}\nbus:\n  - name: bu0\n    host: BU.EXAMPLE.\n    \
                broker_port: 9300\n    fu_host: fu-host.example\ncontroller:\n  agent_port: 9900\n  merger_host: merge.example\n";
    assert_eq!(
        errors(text),
        [
            "conf/bad.yaml:2:29: rus[0].host: \"ru-host.example\" is a placeholder: put your hosts' names here",
            "conf/bad.yaml:5:5: bus[0].host: \"BU.EXAMPLE.\" is a placeholder: put your hosts' names here",
            "conf/bad.yaml:7:5: bus[0].fu_host: \"fu-host.example\" is a placeholder: put your hosts' names here",
            "conf/bad.yaml:10:3: controller.merger_host: \"merge.example\" is a placeholder: put your hosts' names here",
        ]
    );
    // A name that only contains the word is a name.
    parse(&text.replace(".example", ".example.org").replace(".EXAMPLE.", ".examples")).unwrap();
}

/// Memory smaller than the BUs' open files hold back runs (a BU closes a file early when its
/// events wait for an RU short of room) and is advised once a key, with the arithmetic; the
/// default system and memory that holds the files get no advice.
#[test]
fn receive_memory_smaller_than_the_files_is_advised_not_refused() {
    assert_eq!(SystemConfig::default().advice(), Vec::new());
    let small = format!("{BASE}  - name: bu1\nru: {{max_events_buffered: 1500}}\n");
    let advice: Vec<String> = parse(&small).unwrap().advice().iter().map(ToString::to_string).collect();
    assert_eq!(advice.len(), 1, "{advice:?}");
    assert!(
        advice[0].starts_with(
            "ru.max_events_buffered: 1500 events for rus[0] are fewer than the 2000 events the BUs' open files can \
             hold back (2 BUs × bu.max_events_per_file 1000)"
        ) && advice[0].ends_with("give at least 2000, or bu.max_events_per_file at most 750"),
        "{advice:?}"
    );
    let enough = format!("{BASE}  - name: bu1\nru: {{max_events_buffered: 2000}}\n");
    assert_eq!(parse(&enough).unwrap().advice(), Vec::new());
}

#[test]
fn the_fragment_crc_check_is_always_never_or_sampled_and_sampled_0_is_refused() {
    use tessera_formats::fed::CrcCheck;
    assert_eq!(parse(BASE).unwrap().ru.fragment_crc_check, CrcCheck::Always);
    for (value, check) in
        [("never", CrcCheck::Never), ("always", CrcCheck::Always), ("{sampled: 100}", CrcCheck::Sampled(100))]
    {
        let system = parse(&format!("{BASE}ru:\n  fragment_crc_check: {value}\n")).unwrap();
        assert_eq!(system.ru.fragment_crc_check, check, "{value}");
    }
    let e = error(&format!("{BASE}ru:\n  fragment_crc_check: {{sampled: 0}}\n"));
    assert!(e.contains("ru.fragment_crc_check") && e.contains("checks no fragment"), "{e}");
    let e = error(&format!("{BASE}ru:\n  fragment_crc_check: sometimes\n"));
    assert!(e.contains("unknown variant `sometimes`"), "{e}");
}

#[test]
fn a_fault_that_can_never_strike_is_refused_with_why() {
    let with = |run: &str, faults: &str| {
        format!(
            "run: {run}\nrus:\n  - name: ru0\n    feds: \"1024,0-3\"\n  - name: ru1\n    feds: 4-7\n    faults: [{faults}]\n\
             bus:\n  - name: bu0\n"
        )
    };
    // Event mode: before the first event, or after the last one.
    let e = error(&with("{events: 1000, first_event: 10}", "\"skip@5/4\""));
    assert!(e.contains("rus[1].faults[0]") && e.contains("can never strike: the run's first event is 10"), "{e}");
    let e = error(&with("{events: 1000}", "\"skip@1001/4\""));
    assert!(e.contains("the run's last event is 1000 (run.events 1000)"), "{e}");
    assert!(parse(&with("{events: 1000}", "\"skip@1000/4\", \"bad-crc:0.5\"")).is_ok());
    // Orbit mode: a number the run's orbits never have, and one past its last orbit.
    let orbit = "{mode: orbit, orbits_per_lumi_section: 16384, seconds: 2}";
    let e = error(&with(orbit, "\"disconnect@50000/5\""));
    assert!(e.contains("no orbit has number 50000") && e.contains("0..=16383"), "{e}");
    let e = error(&with("{mode: orbit, orbits_per_lumi_section: 16384, orbits: 100}", "\"bad-crc@101/5\""));
    assert!(e.contains("orbit 101 is the run's orbit 101, past its last (run.orbits 100)"), "{e}");
    let e = error(&with(orbit, "\"bad-crc@0/5\""));
    assert!(e.contains("numbered from 1"), "{e}");
    // Lumi section 2's first orbit is 2^18.
    assert!(parse(&with(orbit, "\"bad-crc@262144/5\", \"bad-crc@16383/5\"")).is_ok());
}

#[test]
fn the_links_transport_is_said_per_class_and_with_its_ucx_transports() {
    use tessera_config::{Transport, TransportSection};
    let tcp = TransportSection::default();
    assert_eq!(tcp.words("x"), "links on TCP");
    let ucx = TransportSection { ru_bu: Transport::Ucx, evm_ru: Transport::Ucx, ucx_transports: None };
    assert_eq!(ucx.words("rc_x, from UCX_TLS"), "links on UCX (transports rc_x, from UCX_TLS)");
    let mixed = TransportSection { evm_ru: Transport::Tcp, ucx_transports: Some("sm,self".into()), ..ucx };
    assert_eq!(mixed.words("x"), "links to the BUs on UCX (transports sm,self), between the EVM and the RUs on TCP");
}
