//! Reports as text for people (the `--json` form is serde's).

use crate::event::{EventReport, Problem};
use crate::raw_file::RawFileReport;
use std::fmt::Write;
use tessera_formats::frd::flags;
use tessera_formats::raw::data_type;

/// Writes `n` with thousands separators, for sizes people read.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn flag_names(f: u16) -> String {
    let names: Vec<&str> = [
        (flags::GENERATED, "generated"),
        (flags::INCOMPLETE, "incomplete"),
        (flags::FRAGMENT_ERROR, "fragment-error"),
        (flags::NO_TRIGGER, "no-trigger"),
    ]
    .iter()
    .filter(|(bit, _)| f & bit != 0)
    .map(|(_, name)| *name)
    .collect();
    let known = flags::GENERATED | flags::INCOMPLETE | flags::FRAGMENT_ERROR | flags::NO_TRIGGER;
    match (names.is_empty(), f & !known) {
        (true, 0) => "-".into(),
        (_, 0) => names.join(","),
        (_, other) => format!("{}{}{other:#x}", names.join(","), if names.is_empty() { "" } else { "," }),
    }
}

pub(crate) fn problem_line(out: &mut String, indent: &str, p: &Problem) {
    match p.offset {
        Some(at) => writeln!(out, "{indent}!! at byte {at}: {}", p.message),
        None => writeln!(out, "{indent}!! {}", p.message),
    }
    .expect("writing to a String");
}

/// A raw file as text: header line, one line per event, and with `feds` one line per fragment.
pub fn raw_file(report: &RawFileReport, feds: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", report.path);
    if let Some(h) = &report.header {
        let kind = match h.data_type {
            data_type::FRD_EVENTS => "FRD events",
            data_type::DTH_ORBITS => "DTH orbits",
            data_type::PHASE2_SCOUTING => "Phase-2 scouting",
            _ => "unknown",
        };
        let run = h.run.map_or("-".into(), |r| r.to_string());
        let _ = writeln!(
            out,
            "  {}  data type {} ({kind})  run {run}  LS {}  {} events  {} bytes (header says {})",
            h.magic,
            h.data_type,
            h.lumi_section,
            h.event_count,
            thousands(report.actual_bytes),
            thousands(h.file_bytes)
        );
    }
    if !report.events.is_empty() {
        let _ = writeln!(out, "  {:>10} {:>12} {:>5} {:<12} {:>10} {:<8} FEDs", "event", "offset", "LS", "flags", "bytes", "CRC-32C");
    }
    for ev in &report.events {
        event_line(&mut out, ev, feds);
    }
    for p in &report.problems {
        problem_line(&mut out, "  ", p);
    }
    let total = report.all_problems().count();
    let _ = writeln!(out, "  {} events, {} problems", report.events.len(), total);
    out
}

fn event_line(out: &mut String, ev: &EventReport, feds: bool) {
    let bad_crc16 = ev.feds.iter().filter(|f| !f.crc16_ok).count();
    let trigger = ev.feds.iter().find_map(|f| f.trigger.as_ref());
    let fed_summary = format!(
        "{} ({}){}",
        ev.feds.len(),
        if bad_crc16 == 0 { "CRC-16 ok".to_string() } else { format!("{bad_crc16} bad CRC-16") },
        trigger.map_or(String::new(), |t| format!("  orbit {} BX {}", t.orbit, t.bx))
    );
    let _ = writeln!(
        out,
        "  {:>10} {:>12} {:>5} {:<12} {:>10} {:<8} {fed_summary}",
        ev.event,
        ev.offset,
        ev.lumi_section,
        flag_names(ev.flags),
        thousands(ev.payload_bytes.into()),
        if ev.crc32c_ok { "ok" } else { "BAD" },
    );
    if feds {
        for f in &ev.feds {
            let _ = writeln!(
                out,
                "  {:>10} {:>12}   FED {:>4} {:>8} B  LV1 {:#08x}  BX {:>4}  CRC-16 {}",
                "",
                f.offset,
                f.source_id,
                thousands(f.bytes as u64),
                f.lv1_id,
                f.bx,
                if f.crc16_ok { "ok" } else { "BAD" }
            );
        }
    }
    for p in &ev.problems {
        problem_line(out, "      ", p);
    }
}
