//! `tessera verify`: a BU run directory against every rule of docs/formats.md §4–§7.
//!
//! Checked: names; raw file headers (magic, header size, run and lumi section equal to the
//! name's, event count, file size); every event (CRC-32C, the backward walk, every fragment's
//! CRC-16 and LV1 id, exactly one trigger fragment agreeing on run, lumi section and event number,
//! seeded payloads); event numbers unique in the run; each raw file's `.jsn` present and equal to
//! the file; indices contiguous from 0 in each lumi section; the `.jsd` definitions and
//! `fu.lock`; an EoLS for every lumi section up to the last, closing
//! (`NEvents + NLostEvents == TotalEvents`) and equal to its files; an EoR equal to the run; no
//! `open/` and no temporary files after the run. What a listing cannot show, the order in time in
//! which files appeared, is not checked.
//!
//! An orbit-mode run directory (its raw files orbit files, "HO", with no file header) is checked
//! the same way, with the orbit file's rules instead of the raw file header's and the FRD
//! event's: every rule of the orbit file reader, every block's CRC-32C, every fragment's SR
//! CRC-16, every payload byte against its seed, each orbit's lumi section (`orbit / 2^18 + 1`) and
//! run against the file name's, event ids unique in the run; the orbit-mode `.jsd` legends; each
//! `.jsn`'s NEvents, NBytes and NOrbits against its file; each EoLS's NOrbits − NEmptyOrbits
//! against the orbits its lumi section's files hold; the EoR's NOrbits and NEmptyOrbits against
//! the sums of the EoLS records' and the orbits of the run. Every raw file must be of the
//! directory's mode (that of its first raw file).
//!
//! Given the FED list of the run ([`verify_run_dir_expecting`]), every event must also hold
//! every FED of the list: an event that misses some is a violation that names them and says
//! whether its BU flagged it incomplete (FRD flag bit 1), and the events without each FED and
//! those flagged incomplete are counted ([`FedCoverage`]).

use crate::event::{EventChecks, EventReport, Problem};
use crate::orbit_file::{OrbitReport, inspect_orbit_file};
use crate::raw_file::inspect_raw_file;
use crate::run_dir::{RunDirScan, check_index_doc, file_name, read_doc, read_prefix, scan_run_dir};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, IndexDoc, Legend, OrbitCounts};
use tessera_formats::frd::flags;
use tessera_formats::names::{self, FuLock};
use tessera_formats::orbit::is_orbit_file;
use tessera_formats::raw::data_type;

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The file, relative to the run directory ("." for the directory itself).
    pub file: String,
    /// Byte offset in the file, where the rule concerns bytes.
    pub offset: Option<u64>,
    /// What rule is broken and how.
    pub message: String,
}

/// Errors that stop `verify` before it can check anything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The run directory cannot be listed.
    #[error("cannot read run directory {path}")]
    Unreadable {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The directory is not a run directory.
    #[error(transparent)]
    NotARunDir(#[from] crate::run_dir::NotARunDir),
}

/// How the events of a run cover its FED list: what [`verify_run_dir_expecting`] counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FedCoverage {
    /// The FED list, sorted.
    pub expected_feds: Vec<u16>,
    /// Events checked against it (every FRD event of the run directory's raw files).
    pub events: u64,
    /// Events that miss at least one FED of the list.
    pub events_missing_feds: u64,
    /// Events flagged incomplete (FRD flag bit 1) by their BU.
    pub events_flagged_incomplete: u64,
    /// Whether the run directory is of orbit mode, whose files have no incomplete flag: an orbit
    /// that misses a source was counted incomplete by its BU, and is named as a violation.
    pub orbit_mode: bool,
    /// Per FED of the list that some event misses: the events without it.
    pub missing_per_fed: BTreeMap<u16, u64>,
    /// Per FED not in the list that some event holds: the events with it (not a violation: the
    /// list says which FEDs every event must hold, and a shorter one leaves FEDs out on purpose).
    pub unexpected_per_fed: BTreeMap<u16, u64>,
}

impl FedCoverage {
    /// Checks `event` of `file` against the list `expected`: counts it, and adds a violation if
    /// it misses a FED of the list.
    fn check(&mut self, expected: &BTreeSet<u16>, file: &str, event: &EventReport, found: &mut Found) {
        self.events += 1;
        let held: BTreeSet<u16> = event.feds.iter().map(|f| f.source_id).collect();
        let missing: Vec<u16> = expected.difference(&held).copied().collect();
        let unexpected: Vec<u16> = held.difference(expected).copied().collect();
        let flagged = event.header.flags & flags::INCOMPLETE != 0;
        for &fed in &missing {
            *self.missing_per_fed.entry(fed).or_default() += 1;
        }
        for &fed in &unexpected {
            *self.unexpected_per_fed.entry(fed).or_default() += 1;
        }
        self.events_missing_feds += u64::from(!missing.is_empty());
        self.events_flagged_incomplete += u64::from(flagged);
        if !missing.is_empty() {
            let flag = if flagged { "flagged incomplete" } else { "not flagged incomplete" };
            let message = format!("event {}: {} missing ({flag})", event.header.event, fed_list(&missing));
            found.add(file, Some(event.offset), message);
        }
    }

    /// Checks an orbit of an orbit file against the source list `expected`: each of its events
    /// is counted, and an orbit without a source of the list is a violation that names it (its
    /// BU left that block out and counted the orbit incomplete; an orbit file has no flag to say
    /// so). An orbit file's sources are FEDs of the list alike.
    fn check_orbit(&mut self, expected: &BTreeSet<u16>, file: &str, orbit: &OrbitReport, found: &mut Found) {
        let events = u64::from(orbit.event_count);
        self.events += events;
        let held: BTreeSet<u16> = orbit.sources.iter().filter_map(|&s| u16::try_from(s).ok()).collect();
        let missing: Vec<u16> = expected.difference(&held).copied().collect();
        for &fed in &missing {
            *self.missing_per_fed.entry(fed).or_default() += events;
        }
        for fed in held.difference(expected) {
            *self.unexpected_per_fed.entry(*fed).or_default() += events;
        }
        if !missing.is_empty() {
            self.events_missing_feds += events;
            let sources: Vec<String> = missing.iter().map(u16::to_string).collect();
            let message = format!(
                "orbit {}: {} {} missing, its {events} events incomplete",
                orbit.orbit,
                if missing.len() == 1 { "source" } else { "sources" },
                sources.join(", ")
            );
            found.add(file, Some(orbit.offset), message);
        }
    }
}

/// `FED 3` or `FEDs 3, 7`.
fn fed_list(feds: &[u16]) -> String {
    let ids: Vec<String> = feds.iter().map(u16::to_string).collect();
    format!("FED{} {}", if feds.len() == 1 { "" } else { "s" }, ids.join(", "))
}

struct Found(Vec<Violation>);

impl Found {
    fn add(&mut self, file: impl Into<String>, offset: Option<u64>, message: impl Into<String>) {
        self.0.push(Violation { file: file.into(), offset, message: message.into() });
    }

    fn problem(&mut self, file: &str, p: &Problem) {
        self.add(file, p.offset, p.message.clone());
    }
}

/// Checks the run directory `dir`; returns every violation, sorted by file and offset.
pub fn verify_run_dir(dir: &Path, checks: EventChecks) -> Result<Vec<Violation>, VerifyError> {
    check_run_dir(dir, checks, None).map(|(violations, _)| violations)
}

/// Checks the run directory `dir` as [`verify_run_dir`] does, and that every event holds every
/// FED of the run's list `expected_feds` (the trigger FED among them): returns every violation,
/// sorted by file and offset, and how the events cover the list.
pub fn verify_run_dir_expecting(
    dir: &Path,
    checks: EventChecks,
    expected_feds: &[u16],
) -> Result<(Vec<Violation>, FedCoverage), VerifyError> {
    let expected: BTreeSet<u16> = expected_feds.iter().copied().collect();
    check_run_dir(dir, checks, Some(&expected)).map(|(violations, coverage)| (violations, coverage.unwrap_or_default()))
}

fn check_run_dir(
    dir: &Path,
    checks: EventChecks,
    expected: Option<&BTreeSet<u16>>,
) -> Result<(Vec<Violation>, Option<FedCoverage>), VerifyError> {
    let mut coverage =
        expected.map(|feds| FedCoverage { expected_feds: feds.iter().copied().collect(), ..FedCoverage::default() });
    let unreadable = |source| VerifyError::Unreadable { path: dir.display().to_string(), source };
    if dir.is_dir() {
        crate::run_dir::require_run_dir(dir)?;
    }
    let scan = scan_run_dir(dir).map_err(unreadable)?;
    let mut found = Found(Vec::new());
    for path in &scan.unknown {
        found.add(file_name(path), None, "name follows no rule of the BU directory");
    }
    for path in &scan.wrong_run {
        found.add(file_name(path), None, format!("belongs to another run than {}", scan.run.unwrap_or(0)));
    }
    for path in &scan.temporaries {
        found.add(file_name(path), None, "temporary file left behind");
    }
    let orbit_mode = is_orbit_mode(dir, &scan);
    if let Some(coverage) = &mut coverage {
        coverage.orbit_mode = orbit_mode;
    }
    check_definitions(dir, orbit_mode, &mut found);
    // Once FUs work on the directory (`fu/` exists) they remove processed files: the counts of
    // the EoLS and EoR bound what is left instead of equalling it, and the events that left are
    // checked in the FUs' outputs (`tessera verify` on the storage run directory).
    let consumed = dir.join(names::FU_DIR).is_dir();

    // Raw files, their events and their .jsn. A file whose header cannot be read, that holds no
    // FRD events, or (an orbit file) that could not be read to its end, has its events and
    // orbits not counted (None): counts are not checked against it.
    let mut per_ls: BTreeMap<u32, LumiCount> = BTreeMap::new();
    let mut events_seen: BTreeMap<u64, String> = BTreeMap::new();
    for (&(ls, index), path) in &scan.raw_files {
        let name = file_name(path);
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                found.add(&name, None, format!("cannot read: {e}"));
                continue;
            }
        };
        let (events, orbits) = if is_orbit_file(&bytes) {
            if !orbit_mode {
                found.add(&name, Some(0), "an orbit file (\"HO\") in an event-mode run directory");
            }
            let coverage = coverage.as_mut().zip(expected);
            check_orbit_file(&name, &bytes, checks, &mut events_seen, coverage, &mut found)
        } else {
            if orbit_mode {
                found.add(&name, Some(0), "not an orbit file (\"HO\") in an orbit-mode run directory");
            }
            let report = inspect_raw_file(&name, &bytes, checks);
            for p in report.all_problems() {
                found.problem(&name, p);
            }
            if let Some(h) = &report.header {
                if h.lumi_section != ls {
                    found.add(&name, Some(20), format!("header says lumi section {}, the name {ls}", h.lumi_section));
                }
                if let (Some(run), Some(dir_run)) = (h.run, scan.run)
                    && run != dir_run
                {
                    found.add(&name, Some(16), format!("header says run {run}, the directory {dir_run}"));
                }
            }
            let counted = report.header.as_ref().is_some_and(|h| h.data_type == data_type::FRD_EVENTS);
            for ev in &report.events {
                if let Some(first) = events_seen.insert(ev.header.event.into(), name.clone()) {
                    found.add(
                        &name,
                        Some(ev.offset),
                        format!("event {} is also in {first}: duplicated", ev.header.event),
                    );
                }
                if let (Some(coverage), Some(expected), true) = (&mut coverage, expected, counted) {
                    coverage.check(expected, &name, ev, &mut found);
                }
            }
            (counted.then_some(report.events.len() as u64), None)
        };
        per_ls.entry(ls).or_insert_with(|| LumiCount::new(orbit_mode)).add(events, orbits, bytes.len() as u64);
        match scan.index_jsons.get(&(ls, index)) {
            None => found.add(&name, None, "published without its .jsn"),
            Some(jsn) => match read_doc(jsn, IndexDoc::parse) {
                Err(e) => found.add(file_name(jsn), None, e.to_string()),
                Ok(doc) => {
                    for m in check_index_doc(&doc, events, orbits, bytes.len() as u64) {
                        found.add(file_name(jsn), None, m);
                    }
                    match (orbit_mode, doc.orbits) {
                        (true, None) => {
                            found.add(file_name(jsn), None, "has no NOrbits in an orbit-mode run directory")
                        }
                        (false, Some(_)) => {
                            found.add(file_name(jsn), None, "has NOrbits in an event-mode run directory")
                        }
                        _ => {}
                    }
                }
            },
        }
    }
    for (key, jsn) in &scan.index_jsons {
        if !scan.raw_files.contains_key(key) {
            found.add(file_name(jsn), None, "index JSON without its raw file");
        }
    }
    let mut indices: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &(ls, index) in scan.raw_files.keys() {
        indices.entry(ls).or_default().push(index);
    }
    for (ls, list) in &indices {
        if !consumed && list.iter().enumerate().any(|(i, &index)| i as u32 != index) {
            found.add(".", None, format!("lumi section {ls}: raw file indices {list:?} are not 0, 1, 2..."));
        }
    }

    // End of lumi sections and of the run; the EoR's orbit counts are the sums of the EoLS'.
    let mut eols_orbits = OrbitCounts::default();
    let last_ls = per_ls.keys().chain(scan.end_of_lumis.keys()).copied().max().unwrap_or(0);
    for ls in 1..=last_ls {
        let LumiCount { files, events, bytes, orbits } =
            per_ls.get(&ls).copied().unwrap_or_else(|| LumiCount::new(orbit_mode));
        let Some(path) = scan.end_of_lumis.get(&ls) else {
            found.add(".", None, format!("lumi section {ls}: no EoLS record"));
            continue;
        };
        let name = file_name(path);
        match read_doc(path, EolsDoc::parse) {
            Err(e) => found.add(&name, None, e.to_string()),
            Ok(d) => {
                if !d.is_complete() {
                    found.add(
                        &name,
                        None,
                        format!(
                            "NEvents {} + NLostEvents {} != TotalEvents {}",
                            d.events, d.lost_events, d.total_events
                        ),
                    );
                }
                for (field, says, actual) in
                    [("NFiles", d.files, Some(files)), ("NEvents", d.events, events), ("NBytes", d.bytes, Some(bytes))]
                {
                    if let Some(actual) = actual
                        && (says != actual && !consumed || actual > says)
                    {
                        found.add(
                            &name,
                            None,
                            format!("{field} says {says}, the lumi section's raw files hold {actual}"),
                        );
                    }
                }
                check_eols_orbits(&name, "the lumi section's", d.orbits, orbit_mode, orbits, consumed, &mut found);
                if let Some(c) = d.orbits {
                    eols_orbits.orbits += c.orbits;
                    eols_orbits.empty_orbits += c.empty_orbits;
                }
            }
        }
    }
    match scan.end_of_runs.as_slice() {
        [] => found.add(".", None, "no EoR record: the run did not end"),
        [path] => {
            let name = file_name(path);
            match read_doc(path, EorDoc::parse) {
                Err(e) => found.add(&name, None, e.to_string()),
                Ok(d) => {
                    let files: u64 = per_ls.values().map(|v| v.files).sum();
                    let events: Option<u64> = per_ls.values().map(|v| v.events).sum();
                    let orbits: Option<u64> = if orbit_mode { per_ls.values().map(|v| v.orbits).sum() } else { None };
                    check_eor_orbits(&name, d.orbits, orbit_mode, orbits, eols_orbits, consumed, &mut found);
                    // Lumi sections with raw files or an EoLS; a missing EoLS is reported above.
                    let lumis = per_ls.keys().chain(scan.end_of_lumis.keys()).collect::<BTreeSet<_>>().len() as u64;
                    for (field, says, actual) in [
                        ("NEvents", d.events, events),
                        ("NFiles", d.files, Some(files)),
                        ("NLumis", d.lumis, Some(lumis)),
                        ("LastLumi", d.last_lumi, Some(u64::from(last_ls))),
                    ] {
                        let bound = consumed && matches!(field, "NEvents" | "NFiles");
                        if let Some(actual) = actual
                            && (says != actual && !bound || actual > says)
                        {
                            found.add(&name, None, format!("{field} says {says}, the run holds {actual}"));
                        }
                    }
                }
            }
            if let Some(open) = &scan.open_dir {
                let left: BTreeSet<String> = open.iter().map(|p| file_name(p)).collect();
                found.add(
                    names::OPEN_DIR,
                    None,
                    format!("open/ remains after the EoR, holding {} files {left:?}", left.len()),
                );
            }
        }
        more => found.add(".", None, format!("{} EoR records", more.len())),
    }
    let mut violations = found.0;
    violations.sort_by(|a, b| (&a.file, a.offset).cmp(&(&b.file, b.offset)));
    Ok((violations, coverage))
}

/// What the raw files of one lumi section hold; `None` where a file could not be counted.
#[derive(Debug, Clone, Copy)]
struct LumiCount {
    files: u64,
    events: Option<u64>,
    bytes: u64,
    /// Orbits written (orbit mode only).
    orbits: Option<u64>,
}

impl LumiCount {
    fn new(orbit_mode: bool) -> Self {
        LumiCount { files: 0, events: Some(0), bytes: 0, orbits: orbit_mode.then_some(0) }
    }

    fn add(&mut self, events: Option<u64>, orbits: Option<u64>, bytes: u64) {
        self.files += 1;
        self.events = self.events.zip(events).map(|(a, b)| a + b);
        self.orbits = self.orbits.zip(orbits).map(|(a, b)| a + b);
        self.bytes += bytes;
    }
}

/// Whether `dir` is an orbit-mode run directory: its first raw file is an orbit file, or, with
/// no raw file, its `rawData.jsd` declares NOrbits.
fn is_orbit_mode(dir: &Path, scan: &RunDirScan) -> bool {
    match scan.raw_files.values().next() {
        Some(path) => {
            let mut head = [0u8; 2];
            read_prefix(path, &mut head).is_ok_and(|n| is_orbit_file(&head[..n]))
        }
        None => fs::read_to_string(dir.join(names::RAW_DATA_JSD))
            .ok()
            .and_then(|text| Legend::parse(&text).ok())
            .is_some_and(|legend| legend.position("NOrbits").is_some()),
    }
}

/// Checks an orbit file as `inspect` does (every rule of the reader, CRC-32Cs, CRC-16s, seeded
/// payloads, each orbit's lumi section and run against the name) and that its event ids are new
/// in the run; returns its events and orbits, if the whole file could be read.
fn check_orbit_file(
    name: &str,
    bytes: &[u8],
    checks: EventChecks,
    events_seen: &mut BTreeMap<u64, String>,
    coverage: Option<(&mut FedCoverage, &BTreeSet<u16>)>,
    found: &mut Found,
) -> (Option<u64>, Option<u64>) {
    let report = inspect_orbit_file(name, bytes, checks);
    for p in &report.problems {
        found.problem(name, p);
    }
    if let Some((coverage, expected)) = coverage {
        for orbit in &report.orbits {
            coverage.check_orbit(expected, name, orbit, found);
        }
    }
    for (orbit, event) in report.orbits.iter().flat_map(|o| o.events.iter().map(move |e| (o, e))) {
        if let Some(first) = events_seen.insert(event.event_id, name.to_owned()) {
            let at = event.fragments.first().map_or(orbit.offset, |f| f.offset);
            found.add(name, Some(at), format!("event {} is also in {first}: duplicated", event.event_id));
        }
    }
    report.whole_counts()
}

/// An EoLS's orbit counts: present exactly in orbit mode, the empty ones among the orbits, and
/// the orbits written (those not empty) equal to those the raw files of its `scope` hold (at
/// least them, once FUs consume files).
fn check_eols_orbits(
    name: &str,
    scope: &str,
    counts: Option<OrbitCounts>,
    orbit_mode: bool,
    written: Option<u64>,
    consumed: bool,
    found: &mut Found,
) {
    let Some(c) = orbit_counts(name, counts, orbit_mode, found) else { return };
    let Some(written) = written else { return };
    let says = c.orbits - c.empty_orbits;
    if says != written && !consumed || written > says {
        found.add(
            name,
            None,
            format!(
                "NOrbits {} − NEmptyOrbits {} = {says} orbits written, {scope} raw files hold {written}",
                c.orbits, c.empty_orbits
            ),
        );
    }
}

/// The EoR's orbit counts: as an EoLS's, and equal to the sums of the EoLS records'.
fn check_eor_orbits(
    name: &str,
    counts: Option<OrbitCounts>,
    orbit_mode: bool,
    written: Option<u64>,
    eols: OrbitCounts,
    consumed: bool,
    found: &mut Found,
) {
    let Some(c) = counts.filter(|_| orbit_mode) else {
        orbit_counts(name, counts, orbit_mode, found);
        return;
    };
    for (field, says, sum) in [("NOrbits", c.orbits, eols.orbits), ("NEmptyOrbits", c.empty_orbits, eols.empty_orbits)]
    {
        if says != sum {
            found.add(name, None, format!("{field} says {says}, the EoLS records sum to {sum}"));
        }
    }
    check_eols_orbits(name, "the run's", counts, orbit_mode, written, consumed, found);
}

/// The orbit counts of an EoLS or EoR if they belong there and are consistent; a violation if
/// they are missing in orbit mode, present in event mode, or count more empty orbits than orbits.
fn orbit_counts(name: &str, counts: Option<OrbitCounts>, orbit_mode: bool, found: &mut Found) -> Option<OrbitCounts> {
    match (orbit_mode, counts) {
        (true, None) => found.add(name, None, "has no NOrbits and NEmptyOrbits in an orbit-mode run directory"),
        (false, Some(_)) => found.add(name, None, "has NOrbits and NEmptyOrbits in an event-mode run directory"),
        (true, Some(c)) if c.empty_orbits > c.orbits => {
            found.add(name, None, format!("NEmptyOrbits {} exceeds NOrbits {}", c.empty_orbits, c.orbits))
        }
        (true, Some(c)) => return Some(c),
        (false, None) => {}
    }
    None
}

/// The `.jsd` definitions must be the standard ones (orbit mode's in an orbit-mode run
/// directory), and `fu.lock` must be readable.
fn check_definitions(dir: &Path, orbit_mode: bool, found: &mut Found) {
    let [raw_data, eols, eor] = Legend::run_directory(orbit_mode);
    for (file, expected) in [(names::RAW_DATA_JSD, raw_data), (names::EOLS_JSD, eols), (names::EOR_JSD, eor)] {
        match fs::read_to_string(dir.join(file)) {
            Err(e) => found.add(file, None, format!("cannot read: {e}")),
            Ok(text) => match Legend::parse(&text) {
                Err(e) => found.add(file, None, e.to_string()),
                Ok(legend) if legend != expected => found.add(
                    file,
                    None,
                    format!("legend differs from the standard one; expected {}", expected.to_json()),
                ),
                Ok(_) => {}
            },
        }
    }
    match fs::read_to_string(dir.join(names::FU_LOCK)) {
        Err(e) => found.add(names::FU_LOCK, None, format!("cannot read: {e}")),
        Ok(text) => {
            if let Err(e) = FuLock::parse(&text) {
                found.add(names::FU_LOCK, e.offset().map(|o| o as u64), e.to_string());
            }
        }
    }
}
