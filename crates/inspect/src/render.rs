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
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Most violations [`violations`] prints; it counts the rest.
pub const MAX_VIOLATIONS_PRINTED: usize = 100;

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
        let _ = writeln!(
            out,
            "  {:>10} {:>12} {:>5} {:<12} {:>10} {:<8} FEDs",
            "event", "offset", "LS", "flags", "bytes", "CRC-32C"
        );
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
        ev.header.event,
        ev.offset,
        ev.header.lumi_section,
        flag_names(ev.header.flags),
        thousands(ev.header.payload_bytes.into()),
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

/// An orbit file as text: one line per orbit, and with `fragments` one line per event and per
/// fragment.
pub fn orbit_file(report: &crate::orbit_file::OrbitFileReport, fragments: bool) -> String {
    let mut out = String::new();
    let run = report.orbits.first().map_or("-".into(), |o| o.run.to_string());
    let _ = writeln!(
        out,
        "{}\n  orbit file  run {run}  {} orbits  {} events  {} bytes",
        report.path,
        report.orbits.len(),
        report.event_count(),
        thousands(report.actual_bytes)
    );
    if !report.orbits.is_empty() {
        let _ = writeln!(
            out,
            "  {:>10} {:>12} {:>5} {:>6} {:>12} {:<8} sources",
            "orbit", "offset", "LS", "events", "bytes", "CRC-32C"
        );
    }
    for o in &report.orbits {
        let sources: Vec<String> = o.sources.iter().map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "  {:>10} {:>12} {:>5} {:>6} {:>12} {:<8} {} ({})",
            o.orbit,
            o.offset,
            o.lumi_section,
            o.event_count,
            thousands(o.bytes),
            if o.crc32c_ok { "ok" } else { "BAD" },
            o.sources.len(),
            sources.join(",")
        );
        if fragments {
            for e in &o.events {
                let bad_crc16 = e.fragments.iter().filter(|f| !f.crc16_ok).count();
                let crc16 = if bad_crc16 == 0 { "CRC-16 ok".to_string() } else { format!("{bad_crc16} bad CRC-16") };
                let _ = writeln!(out, "  {:>10} {:>12}   event {}  BX {:>4}  {crc16}", "", "", e.event_id, e.bx);
                for f in &e.fragments {
                    let _ = writeln!(
                        out,
                        "  {:>10} {:>12}     source {:>4} {:>8} B  BX {:>4}  CRC-16 {}",
                        "",
                        f.offset,
                        f.source_id,
                        thousands(f.bytes as u64),
                        f.bx,
                        if f.crc16_ok { "ok" } else { "BAD" }
                    );
                }
            }
        }
    }
    for p in &report.problems {
        problem_line(&mut out, "  ", p);
    }
    let _ = writeln!(out, "  {} orbits, {} problems", report.orbits.len(), report.problems.len());
    out
}

/// Any report as text.
pub fn target(t: &crate::Target, feds: bool) -> String {
    match t {
        crate::Target::RawFile(r) => raw_file(r, feds),
        crate::Target::OrbitFile(o) => orbit_file(o, feds),
        crate::Target::Stream(s) => stream(s, feds),
        crate::Target::RunDir(d) => run_dir(d),
        crate::Target::Json(j) => json(j),
    }
}

/// A run directory as a table per lumi section (with an orbits column for an orbit-mode one).
pub fn run_dir(d: &crate::run_dir::RunDirReport) -> String {
    let mut out = String::new();
    let run = d.run.map_or("? (name is not runRRRRRR)".into(), |r| r.to_string());
    let orbit_mode = d.lumi_sections.iter().any(|r| r.orbits.is_some());
    let orbits_column = |orbits: String| if orbit_mode { format!(" {orbits:>8}") } else { String::new() };
    let _ = writeln!(out, "{}  run {run}", d.path);
    let _ = writeln!(
        out,
        "  {:>6} {:>6} {:>8}{} {:>14} {:>6}  EoLS",
        "LS",
        "files",
        "events",
        orbits_column("orbits".into()),
        "bytes",
        "lost"
    );
    let mut totals = (0, 0, 0, 0, 0);
    for r in &d.lumi_sections {
        let lost = r.lost.map_or("-".into(), |l| l.to_string());
        let _ = writeln!(
            out,
            "  {:>6} {:>6} {:>8}{} {:>14} {:>6}  {}",
            r.ls,
            r.files,
            r.events,
            orbits_column(r.orbits.unwrap_or(0).to_string()),
            thousands(r.bytes),
            lost,
            r.eols
        );
        totals = (
            totals.0 + r.files,
            totals.1 + r.events,
            totals.2 + r.bytes,
            totals.3 + r.lost.unwrap_or(0),
            totals.4 + r.orbits.unwrap_or(0),
        );
    }
    let _ = writeln!(
        out,
        "  {:>6} {:>6} {:>8}{} {:>14} {:>6}",
        "total",
        totals.0,
        totals.1,
        orbits_column(totals.4.to_string()),
        thousands(totals.2),
        totals.3
    );
    match &d.end_of_run {
        None => {
            let _ = writeln!(out, "  EoR: none (run not ended)");
        }
        Some(Ok(e)) => {
            let orbits = match (e.orbits, e.empty_orbits) {
                (Some(o), Some(empty)) => format!(", {o} orbits ({empty} empty)"),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  EoR: {} events, {} files, {} lumi sections, last {}{orbits}",
                e.events, e.files, e.lumis, e.last_lumi
            );
        }
        Some(Err(e)) => {
            let _ = writeln!(out, "  EoR: unreadable: {e}");
        }
    }
    if let Some(n) = d.open_files {
        let _ = writeln!(out, "  open/: {n} files being written");
    }
    for p in &d.problems {
        problem_line(&mut out, "  ", p);
    }
    out
}

/// `verify`'s verdict: each violation with file and offset, then a count.
pub fn violations(run_dir: &std::path::Path, v: &[crate::verify::Violation]) -> String {
    let mut out = String::new();
    for x in v.iter().take(MAX_VIOLATIONS_PRINTED) {
        let at = x.offset.map_or(String::new(), |o| format!(" at byte {o}"));
        let _ = writeln!(out, "{}/{}{at}: {}", run_dir.display(), x.file, x.message);
    }
    if v.len() > MAX_VIOLATIONS_PRINTED {
        let _ = writeln!(
            out,
            "{}: ... and {} more violations (--json lists every one)",
            run_dir.display(),
            v.len() - MAX_VIOLATIONS_PRINTED
        );
    }
    if v.is_empty() {
        let _ = writeln!(out, "{}: OK, every rule holds", run_dir.display());
    } else {
        let _ = writeln!(out, "{}: {} violations", run_dir.display(), v.len());
    }
    out
}

/// How the events of a run cover its FED list, in one line: how many miss FEDs, per FED how
/// many miss it, and how many their BU flagged incomplete.
pub fn fed_coverage(run_dir: &std::path::Path, c: &crate::verify::FedCoverage) -> String {
    let per_fed = |counts: &std::collections::BTreeMap<u16, u64>| {
        counts.iter().map(|(fed, n)| format!("FED {fed}: {n}")).collect::<Vec<_>>().join(", ")
    };
    let mut line = format!(
        "{}: {} of {} events miss FEDs of the expected list",
        run_dir.display(),
        c.events_missing_feds,
        c.events
    );
    if !c.missing_per_fed.is_empty() {
        let _ = write!(line, " ({})", per_fed(&c.missing_per_fed));
    }
    if c.orbit_mode {
        let _ = write!(line, "; orbit files carry no incomplete flag: each orbit missing a source is named below");
    } else {
        let _ = write!(line, "; {} flagged incomplete by their BU", c.events_flagged_incomplete);
    }
    if !c.unexpected_per_fed.is_empty() {
        let _ = write!(line, "; events also hold FEDs outside the list ({})", per_fed(&c.unexpected_per_fed));
    }
    line.push('\n');
    line
}

/// A stream capture: totals per source, and with `all` every fragment or orbit.
pub fn stream(s: &crate::stream::StreamReport, all: bool) -> String {
    let mut out = String::new();
    let what = if s.protocol == "DTH" { "orbits" } else { "fragments" };
    let _ = writeln!(out, "{}  {} stream capture  {} bytes", s.path, s.protocol, thousands(s.bytes));
    let _ =
        writeln!(out, "  {:>8} {:>10} {:>14} {:>10} {:>10} {:>6}", "source", what, "bytes", "first", "last", "gaps");
    for (id, x) in &s.sources {
        let _ = writeln!(
            out,
            "  {:>8} {:>10} {:>14} {:>10} {:>10} {:>6}",
            id,
            x.units,
            thousands(x.bytes),
            x.first,
            x.last,
            x.gaps
        );
    }
    if all {
        let _ = writeln!(
            out,
            "  {:>12} {:>8} {:>10} {:>6} {:>10} {:>6}  CRC",
            "offset", "source", "number", "blocks", "bytes", "events"
        );
        for u in &s.units {
            let _ = writeln!(
                out,
                "  {:>12} {:>8} {:>10} {:>6} {:>10} {:>6}  {}",
                u.offset,
                u.source_id,
                u.number,
                u.blocks,
                thousands(u.bytes as u64),
                u.events,
                if u.crc_ok { "ok" } else { "BAD" }
            );
        }
    }
    for p in &s.problems {
        problem_line(&mut out, "  ", p);
    }
    let _ = writeln!(out, "  {} {what}, {} problems", s.units.len(), s.problems.len());
    out
}

/// A bookkeeping file: its kind and fields.
pub fn json(j: &crate::json::JsonReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}  {}", j.path, j.kind);
    for (name, value) in &j.fields {
        let _ = writeln!(out, "  {name:<20} {value}");
    }
    for p in &j.problems {
        problem_line(&mut out, "  ", p);
    }
    out
}
