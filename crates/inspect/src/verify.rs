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
//! Given the FED list of the run ([`verify_run_dir_expecting`]), every event must also hold
//! every FED of the list: an event that misses some is a violation that names them and says
//! whether its BU flagged it incomplete (FRD flag bit 1), and the events without each FED and
//! those flagged incomplete are counted ([`FedCoverage`]).

use crate::event::{EventChecks, EventReport, Problem};
use crate::raw_file::inspect_raw_file;
use crate::run_dir::{check_index_doc, file_name, read_doc, scan_run_dir};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, IndexDoc, Legend};
use tessera_formats::frd::flags;
use tessera_formats::names::{self, FuLock};
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
    check_definitions(dir, &mut found);
    // Once FUs work on the directory (`fu/` exists) they remove processed files: the counts of
    // the EoLS and EoR bound what is left instead of equalling it, and the events that left are
    // checked in the FUs' outputs (`tessera verify` on the storage run directory).
    let consumed = dir.join(names::FU_DIR).is_dir();

    // Raw files, their events and their .jsn. A file whose header cannot be read, or that holds
    // no FRD events, has its events not counted (None): counts are not checked against it.
    let mut per_ls: BTreeMap<u32, (u64, Option<u64>, u64)> = BTreeMap::new(); // files, events, bytes
    let mut events_seen: BTreeMap<u32, String> = BTreeMap::new();
    for (&(ls, index), path) in &scan.raw_files {
        let name = file_name(path);
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                found.add(&name, None, format!("cannot read: {e}"));
                continue;
            }
        };
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
            if let Some(first) = events_seen.insert(ev.header.event, name.clone()) {
                found.add(&name, Some(ev.offset), format!("event {} is also in {first}: duplicated", ev.header.event));
            }
            if let (Some(coverage), Some(expected), true) = (&mut coverage, expected, counted) {
                coverage.check(expected, &name, ev, &mut found);
            }
        }
        let events = counted.then_some(report.events.len() as u64);
        let entry = per_ls.entry(ls).or_insert((0, Some(0), 0));
        *entry = (entry.0 + 1, entry.1.zip(events).map(|(a, b)| a + b), entry.2 + bytes.len() as u64);
        match scan.index_jsons.get(&(ls, index)) {
            None => found.add(&name, None, "published without its .jsn"),
            Some(jsn) => match read_doc(jsn, IndexDoc::parse) {
                Err(e) => found.add(file_name(jsn), None, e.to_string()),
                Ok(doc) => {
                    if let Some(m) = check_index_doc(&doc, events, bytes.len() as u64) {
                        found.add(file_name(jsn), None, m);
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

    // End of lumi sections and of the run.
    let last_ls = per_ls.keys().chain(scan.end_of_lumis.keys()).copied().max().unwrap_or(0);
    for ls in 1..=last_ls {
        let (files, events, bytes) = per_ls.get(&ls).copied().unwrap_or((0, Some(0), 0));
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
                    let files: u64 = per_ls.values().map(|v| v.0).sum();
                    let events: Option<u64> = per_ls.values().map(|v| v.1).sum();
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

/// The `.jsd` definitions must be the standard ones, and `fu.lock` must be readable.
fn check_definitions(dir: &Path, found: &mut Found) {
    for (file, expected) in
        [(names::RAW_DATA_JSD, Legend::raw_data()), (names::EOLS_JSD, Legend::eols()), (names::EOR_JSD, Legend::eor())]
    {
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
