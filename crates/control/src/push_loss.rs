//! What a BU lost under push takes with it (`BU_LOST`): the events the destination function gave
//! it before RU 0 excluded it, less those it published. Nothing brings them back (no event
//! manager holds them to give to another BU, as pull's does), so they are counted, by BU.

use std::path::Path;
use tessera_formats::bookkeeping::IndexDoc;
use tessera_formats::names::{self, BuFileName};
use tessera_runtime::ru_node::Excluded;

/// The reason key of events lost with a BU under push.
pub const BU_LOST: &str = "BU_LOST";

/// Events lost with the excluded BUs: for each, the events it was given before its exclusion
/// less those it published (`published` of its index).
pub fn events_lost(excluded: &[Excluded], published: impl Fn(u16) -> u64) -> u64 {
    excluded.iter().map(|x| x.events_given.saturating_sub(published(x.bu))).sum()
}

/// The events of the files a BU published in its run directory `bu_dir/runNNNNNN`, from their
/// index JSON documents; `None` if the directory cannot be read here (on another host) or a
/// document cannot be read: a dead BU's own count is then unknown.
pub fn published_in(bu_dir: &Path, run: u32) -> Option<u64> {
    let dir = bu_dir.join(names::run_dir_name(run));
    let mut events = 0;
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if matches!(BuFileName::parse(name), Ok(BuFileName::IndexJson { .. })) {
            events += IndexDoc::parse(&std::fs::read_to_string(&path).ok()?).ok()?.events;
        }
    }
    Some(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_bu_loses_what_it_was_given_and_did_not_publish() {
        let excluded = [
            Excluded { bu: 1, from_event: 4097, events_given: 2048 },
            Excluded { bu: 3, from_event: 8193, events_given: 100 },
        ];
        assert_eq!(events_lost(&excluded, |bu| if bu == 1 { 2000 } else { 100 }), 48);
        assert_eq!(events_lost(&[], |_| 0), 0);
    }

    #[test]
    fn published_events_are_read_from_the_index_documents_and_an_unreadable_directory_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(published_in(dir.path(), 7), None, "no run directory");
        let run = dir.path().join(names::run_dir_name(7));
        std::fs::create_dir_all(&run).unwrap();
        assert_eq!(published_in(dir.path(), 7), Some(0));
        let spec = tessera_rundir::sample::SampleSpec { run: 7, ..Default::default() };
        let summary = tessera_rundir::sample::write_sample_run(dir.path(), &spec).unwrap();
        assert_eq!(published_in(dir.path(), 7), Some(summary.events));
    }
}
