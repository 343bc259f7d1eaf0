//! Report on one raw file: its header and every event.

use crate::event::{EventChecks, EventReport, Problem, check_event};
use serde::Serialize;
use tessera_formats::raw::{RawFile, RawFileHeader, data_type};

/// A raw file's header as found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeaderReport {
    /// `RAW_0001` or `RAW_0002`.
    pub magic: String,
    /// Data type.
    pub data_type: u16,
    /// Records the header announces.
    pub event_count: u32,
    /// Run number (RAW_0002 only).
    pub run: Option<u32>,
    /// Lumi section.
    pub lumi_section: u32,
    /// File size the header announces.
    pub file_bytes: u64,
}

impl From<&RawFileHeader> for HeaderReport {
    fn from(h: &RawFileHeader) -> Self {
        HeaderReport {
            magic: format!("RAW_000{}", h.version),
            data_type: h.data_type,
            event_count: h.event_count,
            run: h.run,
            lumi_section: h.lumi_section,
            file_bytes: h.file_bytes,
        }
    }
}

/// A raw file: header, events, and what is wrong with the file as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RawFileReport {
    /// The file's name as given.
    pub path: String,
    /// Its size on disk.
    pub actual_bytes: u64,
    /// The header, if it could be read.
    pub header: Option<HeaderReport>,
    /// Every record that could be read.
    pub events: Vec<EventReport>,
    /// Problems of the file itself (header, sizes, counts, records that cannot be read).
    pub problems: Vec<Problem>,
}

impl RawFileReport {
    /// Every problem, the file's and its events', in file order.
    pub fn all_problems(&self) -> impl Iterator<Item = &Problem> {
        self.problems.iter().chain(self.events.iter().flat_map(|e| e.problems.iter()))
    }
}

/// Reads and checks a whole raw file held in `bytes`.
pub fn inspect_raw_file(path: &str, bytes: &[u8], checks: EventChecks) -> RawFileReport {
    let mut report = RawFileReport {
        path: path.to_owned(),
        actual_bytes: bytes.len() as u64,
        header: None,
        events: Vec::new(),
        problems: Vec::new(),
    };
    let header = match RawFileHeader::parse(bytes) {
        Ok(h) => h,
        Err(e) => {
            report.problems.push(Problem::at(e.offset().unwrap_or(0) as u64, e.to_string()));
            return report;
        }
    };
    report.header = Some((&header).into());
    if header.data_type != data_type::FRD_EVENTS {
        report
            .problems
            .push(Problem::at(10, format!("data type {} holds no FRD events; records not read", header.data_type)));
        return report;
    }
    if let Err(e) = RawFile::parse(bytes) {
        report.problems.push(Problem::at(e.offset().unwrap_or(0) as u64, e.to_string()));
    }
    for item in RawFile::from_header(header, bytes).events() {
        match item {
            Ok((offset, event)) => {
                let mut ev = check_event(&event, offset as u64, checks);
                if ev.header.lumi_section != header.lumi_section {
                    ev.problems.push(Problem::at(
                        offset as u64,
                        format!(
                            "event {}: lumi section {} in a file of lumi section {}",
                            ev.header.event, ev.header.lumi_section, header.lumi_section
                        ),
                    ));
                }
                if let Some(run) = header.run.filter(|&r| r != ev.header.run) {
                    ev.problems.push(Problem::at(
                        offset as u64,
                        format!("event {}: run {} in a file of run {run}", ev.header.event, ev.header.run),
                    ));
                }
                report.events.push(ev);
            }
            Err(e) => report.problems.push(Problem::at(e.offset().unwrap_or(0) as u64, e.to_string())),
        }
    }
    report
}
