//! The menu selector on events built with the format writers.

use tessera_formats::fed::{event_type, fragment_len};
use tessera_formats::frd::{FRD_HEADER_BYTES, FrdEvent, flags, write_frd_event};
use tessera_formats::seeded::write_seeded_fragment;
use tessera_formats::tcds::{TCDS_FRAGMENT_BYTES, TcdsRecord, orbit_in_lumi_section};
use tessera_fu::menu::Menu;
use tessera_fu::{EventSummary, MenuSelector, StreamSet, SummaryError};

const RUN: u32 = 123_456;

/// An event to build: its number, its trigger fragment's (trigger type, BX) if it has one, and
/// its other FEDs with their payload sizes in bytes (whole words).
struct Spec<'a> {
    event: u32,
    trigger: Option<(u8, u16)>,
    feds: &'a [(u16, usize)],
}

/// The FRD record of `spec`: trigger fragment first, then the FEDs in the order given.
fn record(spec: &Spec<'_>) -> Vec<u8> {
    let mut fragments = Vec::new();
    if let Some((trigger_type, bx)) = spec.trigger {
        let mut tcds = vec![0u8; TCDS_FRAGMENT_BYTES];
        let trigger = TcdsRecord {
            run: RUN,
            lumi_section: 1,
            orbit: orbit_in_lumi_section(1, 5),
            bx,
            event_number: spec.event.into(),
            ..TcdsRecord::default()
        };
        trigger.write(&mut tcds, trigger_type).unwrap();
        fragments.push(tcds);
    }
    for &(fed, payload) in spec.feds {
        let mut frag = vec![0u8; fragment_len(payload)];
        write_seeded_fragment(&mut frag, RUN, fed, spec.event.into(), 0, payload).unwrap();
        fragments.push(frag);
    }
    let pieces: Vec<&[u8]> = fragments.iter().map(Vec::as_slice).collect();
    let mut out = vec![0u8; FRD_HEADER_BYTES + pieces.iter().map(|p| p.len()).sum::<usize>()];
    write_frd_event(&mut out, flags::GENERATED, RUN, 1, spec.event, &pieces).unwrap();
    out
}

fn summary(spec: &Spec<'_>) -> EventSummary {
    let bytes = record(spec);
    EventSummary::from_frd(&FrdEvent::parse(&bytes).unwrap()).unwrap()
}

/// A physics event with FEDs 0, 1 and 3.
fn physics(event: u32, bx: u16) -> EventSummary {
    summary(&Spec { event, trigger: Some((event_type::PHYSICS, bx)), feds: &[(0, 64), (1, 128), (3, 96)] })
}

/// A selector for one path feeding stream `A`, with `conditions` (YAML flow mapping) and
/// `prescale`.
fn selector(conditions: &str, prescale: u32) -> MenuSelector {
    let text = format!(
        "streams: [A]\npaths:\n  - name: p\n    streams: [A]\n    prescale: {prescale}\n    conditions: {conditions}\n"
    );
    MenuSelector::new(&Menu::from_yaml(&text, "test.yaml".as_ref()).unwrap())
}

fn accepts(conditions: &str, event: &EventSummary) -> bool {
    let streams = selector(conditions, 1).select(event);
    assert!(streams == StreamSet::NONE || streams == StreamSet(1), "{streams:?}");
    !streams.is_empty()
}

#[test]
fn summary_holds_the_header_trigger_and_feds() {
    let s = summary(&Spec { event: 42, trigger: Some((event_type::CALIBRATION, 1234)), feds: &[(7, 8), (2, 40)] });
    assert_eq!((s.run, s.lumi_section, s.event), (RUN, 1, 42));
    assert_eq!(s.payload_bytes, 952 + 24 + 56);
    assert_eq!((s.trigger_type, s.bx), (Some(event_type::CALIBRATION), Some(1234)));
    assert_eq!(s.feds(), [(2, 56), (7, 24), (1024, 952)]);
    assert_eq!((s.fed_bytes(2), s.fed_bytes(3)), (Some(56), None));

    let bare = summary(&Spec { event: 43, trigger: None, feds: &[(3, 8)] });
    assert_eq!((bare.trigger_type, bare.bx), (None, None));
    assert_eq!(bare.feds(), [(3, 24)]);

    // A summary refilled in place forgets the previous event.
    let mut reused = s.clone();
    reused.read(&FrdEvent::parse(&record(&Spec { event: 43, trigger: None, feds: &[(3, 8)] })).unwrap()).unwrap();
    assert_eq!(reused, bare);
}

#[test]
fn trigger_type_condition() {
    let calibration = summary(&Spec { event: 1, trigger: Some((event_type::CALIBRATION, 10)), feds: &[] });
    let no_trigger = summary(&Spec { event: 1, trigger: None, feds: &[(0, 8)] });
    assert!(accepts("{trigger_type: [2, 3]}", &calibration));
    assert!(!accepts("{trigger_type: [1]}", &calibration));
    assert!(!accepts("{trigger_type: [1, 2]}", &no_trigger));
    assert!(accepts("{}", &no_trigger), "no condition: every event passes");
}

#[test]
fn bx_condition_is_inclusive() {
    let range = "{bx: {min: 100, max: 200}}";
    assert!(accepts(range, &physics(1, 100)));
    assert!(accepts(range, &physics(1, 200)));
    assert!(!accepts(range, &physics(1, 99)));
    assert!(!accepts(range, &physics(1, 201)));
    assert!(!accepts(range, &summary(&Spec { event: 1, trigger: None, feds: &[] })));
}

#[test]
fn fed_presence_conditions() {
    let event = physics(1, 0);
    assert!(accepts("{feds_present: [0, 3, 1024]}", &event));
    assert!(!accepts("{feds_present: [0, 2]}", &event));
    assert!(accepts("{feds_absent: [2, 5]}", &event));
    assert!(!accepts("{feds_absent: [5, 3]}", &event));
    assert!(accepts("{feds_present: [1], feds_absent: [2]}", &event));
}

#[test]
fn fed_size_condition_counts_header_and_trailer() {
    let event = physics(1, 0); // FED 3: 96 bytes of payload, a 112-byte fragment
    assert!(accepts("{fed_size_bytes: {fed: 3, min: 112, max: 112}}", &event));
    assert!(!accepts("{fed_size_bytes: {fed: 3, max: 111}}", &event));
    assert!(!accepts("{fed_size_bytes: {fed: 3, min: 113}}", &event));
    assert!(!accepts("{fed_size_bytes: {fed: 4}}", &event), "an absent FED fails");
}

#[test]
fn event_size_condition_is_the_payload() {
    let event = physics(1, 0);
    let payload = 952 + (16 + 64) + (16 + 128) + (16 + 96);
    assert_eq!(event.payload_bytes, payload);
    assert!(accepts(&format!("{{event_size_bytes: {{min: {payload}, max: {payload}}}}}"), &event));
    assert!(!accepts(&format!("{{event_size_bytes: {{max: {}}}}}", payload - 1), &event));
    assert!(!accepts(&format!("{{event_size_bytes: {{min: {}}}}}", payload + 1), &event));
}

#[test]
fn all_conditions_must_hold() {
    let event = physics(1, 150);
    assert!(accepts("{trigger_type: [1], bx: {min: 100, max: 200}, feds_present: [3]}", &event));
    assert!(!accepts("{trigger_type: [1], bx: {min: 100, max: 200}, feds_present: [4]}", &event));
}

#[test]
fn prescale_keeps_the_first_of_every_n_passing_events() {
    let mut selector = selector("{bx: {max: 0}}", 3);
    let mut accepted = Vec::new();
    let mut passing = 0;
    for event in 1..=40 {
        // Every other event fails the condition and must not move the prescale counter.
        let passes = event % 2 == 0;
        let streams = selector.select(&physics(event, if passes { 0 } else { 1 }));
        if passes {
            passing += 1;
            if !streams.is_empty() {
                accepted.push(passing);
            }
        } else {
            assert!(streams.is_empty());
        }
    }
    assert_eq!(accepted, [1, 4, 7, 10, 13, 16, 19]);
    assert_eq!(selector.path_counts(), [("p".to_owned(), 20, 7)]);
}

#[test]
fn prescale_zero_disables_the_path() {
    let mut selector = selector("{}", 0);
    assert!((1..=10).all(|e| selector.select(&physics(e, 0)).is_empty()));
    assert_eq!(selector.path_counts(), [("p".to_owned(), 0, 0)]);
}

#[test]
fn random_fraction_is_about_right_and_repeatable() {
    let events: Vec<EventSummary> = (1..=10_000).map(|e| physics(e, 0)).collect();
    let run =
        |selector: &mut MenuSelector| -> Vec<bool> { events.iter().map(|e| !selector.select(e).is_empty()).collect() };
    let first = run(&mut selector("{random_fraction: 0.25}", 1));
    let kept = first.iter().filter(|&&k| k).count();
    assert!((2300..=2700).contains(&kept), "{kept} of 10000");
    assert_eq!(run(&mut selector("{random_fraction: 0.25}", 1)), first, "the same draws on a second run");
    assert!(run(&mut selector("{random_fraction: 0}", 1)).iter().all(|&k| !k));
    assert!(run(&mut selector("{random_fraction: 1}", 1)).iter().all(|&k| k));
}

#[test]
fn random_draws_differ_between_paths() {
    let text = "streams: [A, B]\npaths:\n  - {name: a, streams: [A], conditions: {random_fraction: 0.5}}\n  \
                - {name: b, streams: [B], conditions: {random_fraction: 0.5}}\n";
    let mut selector = MenuSelector::new(&Menu::from_yaml(text, "test.yaml".as_ref()).unwrap());
    let mut both = 0;
    for event in 1..=4000 {
        let streams = selector.select(&physics(event, 0));
        both += usize::from(streams.contains(0) && streams.contains(1));
    }
    // Independent draws: about a quarter in both, not a half.
    assert!((800..=1200).contains(&both), "{both} of 4000 in both streams");
}

#[test]
fn an_event_goes_to_the_streams_of_every_accepting_path() {
    let text = "streams: [Physics, Express, Calibration]\npaths:\n  \
                - {name: physics, streams: [Physics], conditions: {trigger_type: [1]}}\n  \
                - {name: express, streams: [Express, Physics], conditions: {feds_present: [3]}}\n  \
                - {name: calibration, streams: [Calibration], conditions: {trigger_type: [2]}}\n";
    let mut selector = MenuSelector::new(&Menu::from_yaml(text, "test.yaml".as_ref()).unwrap());
    assert_eq!(selector.streams(), ["Physics", "Express", "Calibration"]);
    assert_eq!(selector.select(&physics(1, 0)), StreamSet(0b011));
    let calibration = summary(&Spec { event: 2, trigger: Some((event_type::CALIBRATION, 0)), feds: &[(3, 8)] });
    assert_eq!(selector.select(&calibration), StreamSet(0b111));
    let bare = summary(&Spec { event: 3, trigger: Some((event_type::RANDOM, 0)), feds: &[] });
    assert_eq!(selector.select(&bare), StreamSet::NONE);
    let counts = selector.path_counts();
    assert_eq!(counts[1], ("express".to_owned(), 2, 2));
    assert_eq!(counts[2], ("calibration".to_owned(), 1, 1));
}

#[test]
fn default_menu_keeps_some_but_not_all_emulated_events() {
    // Like the emulator's: trigger type 1 everywhere, bunch crossings spread over the orbit.
    let mut selector = MenuSelector::new(&Menu::default());
    let mut per_stream = [0u32; 3];
    let mut kept = 0;
    for event in 1..=10_000u32 {
        let streams = selector.select(&physics(event, (event.wrapping_mul(7919) % 3564) as u16));
        kept += u32::from(!streams.is_empty());
        for i in streams.iter() {
            per_stream[i] += 1;
        }
    }
    let [physics, express, calibration] = per_stream;
    assert!((4700..=5300).contains(&physics), "{per_stream:?}");
    assert!((350..=650).contains(&express), "{per_stream:?}");
    assert!((200..=500).contains(&calibration), "{per_stream:?}");
    assert!((5000..=6000).contains(&kept), "{kept}");
}

#[test]
fn malformed_events_are_errors() {
    let good = record(&Spec { event: 9, trigger: Some((1, 5)), feds: &[(0, 64)] });
    let parse = |bytes: &[u8]| EventSummary::from_frd(&FrdEvent::parse(bytes).unwrap());

    // A broken trailer: the payload no longer splits into fragments.
    let mut broken = good.clone();
    let last = broken.len() - 8;
    broken[last..].fill(0xAB);
    let e = parse(&broken).unwrap_err();
    assert!(matches!(e, SummaryError::Format { run: RUN, event: 9, .. }), "{e}");
    assert!(e.to_string().starts_with("run 123456 event 9: "), "{e}");

    // A trigger FED id on a fragment that is not a 952-byte trigger record.
    let short_trigger = record(&Spec { event: 9, trigger: None, feds: &[(1024, 64)] });
    let e = parse(&short_trigger).unwrap_err();
    assert!(e.to_string().contains("trigger fragment: bad size"), "{e}");

    let twice = record(&Spec { event: 9, trigger: None, feds: &[(4, 8), (4, 16)] });
    assert_eq!(parse(&twice).unwrap_err().to_string(), "run 123456 event 9: FED 4 has two fragments");

    // Leftover bytes before the first fragment.
    let mut fragments = vec![0u8; 8];
    fragments.extend_from_slice(&good[FRD_HEADER_BYTES..]);
    let mut padded = vec![0u8; FRD_HEADER_BYTES + fragments.len()];
    write_frd_event(&mut padded, 0, RUN, 1, 9, &[&fragments]).unwrap();
    assert!(parse(&padded).is_err());

    // Any payload gives a summary or an error, never a panic.
    for seed in 0..200u64 {
        let mut payload = vec![0u8; 8 * (1 + seed as usize % 40)];
        for (i, b) in payload.iter_mut().enumerate() {
            *b = (seed.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64 * 31) >> 3) as u8;
        }
        let mut rec = vec![0u8; FRD_HEADER_BYTES + payload.len()];
        write_frd_event(&mut rec, 0, RUN, 1, 9, &[&payload]).unwrap();
        let _ = parse(&rec);
    }
}
