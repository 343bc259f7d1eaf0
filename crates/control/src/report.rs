//! What a unit process says when it ends, as one JSON line on its standard output (`tessera
//! evm|ru|bu --json`): the unit writes it ([`RuEnd::of`], [`BuEnd::of`]) and the controller
//! reads it back from what its agent kept of that output ([`RuEnd::read`], [`BuEnd::read`]),
//! with the same structs, so that a figure one side names the other cannot miss.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tessera_fu::broker::BrokerTally;
use tessera_runtime::bu_node::BuReport;
use tessera_runtime::ru_node::{Excluded, NodeError, RuReport};

/// How an RU's (or the EVM's) process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuEnd {
    /// The unit's name in the system file.
    pub unit: String,
    /// Problems the unit counted.
    pub problems: u64,
    /// Its figures, or why it failed.
    #[serde(flatten)]
    pub outcome: Ended<RuFigures>,
}

/// A unit's figures at its end, or why it failed (`error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Ended<T> {
    /// The unit failed.
    Failed {
        /// Why.
        error: String,
    },
    /// The unit ended with these figures.
    Figures(T),
}

/// An RU's figures at its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuFigures {
    /// Fragments read from its FEDs.
    pub fragments: u64,
    /// Fragments found corrupt.
    pub corrupt_fragments: u64,
    /// Fragments that came after their event had gone out without them.
    pub late_fragments: u64,
    /// Super-fragments sent to BUs.
    pub parts_sent: u64,
    /// Super-fragments sent with a FED missing.
    pub incomplete_parts: u64,
    /// The EVM's figures, on the EVM's node.
    pub evm: Option<EvmFigures>,
    /// Events triggered, on RU 0's node (either protocol).
    #[serde(default)]
    pub triggered: Option<u64>,
    /// Push, RU 0: the BUs excluded after their loss.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<Excluded>,
    /// How the trigger stream broke before run control stopped the trigger (EVM): the run failed.
    pub trigger_fault: Option<TriggerFaultEnd>,
    /// Per FED, fragments received of events after the run's last.
    pub orphan_fragments: Vec<OrphanFragments>,
}

/// The EVM's figures at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvmFigures {
    /// Events triggered.
    pub triggered: u64,
    /// Events committed to BUs.
    pub committed: u64,
    /// Events assigned again after their BU was lost.
    pub reassigned: u64,
    /// Events lost because their lumi section closed before they were built.
    pub lost_lumi_closed: u64,
}

/// A trigger fault as the EVM's end says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerFaultEnd {
    /// Its stable key.
    pub key: String,
    /// The sentence that says it.
    pub error: String,
}

/// Fragments of one FED received for events after the run's last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrphanFragments {
    /// The FED.
    pub fed: u16,
    /// How many.
    pub fragments: u64,
}

impl RuEnd {
    /// The end of RU `unit` from its node's result and the problems it counted.
    pub fn of(unit: &str, result: &Result<RuReport, NodeError>, problems: u64) -> Self {
        let outcome = match result {
            Ok(r) => Ended::Figures(RuFigures {
                fragments: r.ru.fragments,
                corrupt_fragments: r.ru.corrupt_fragments,
                late_fragments: r.ru.late_fragments,
                parts_sent: r.ru.parts_sent,
                incomplete_parts: r.ru.incomplete_parts,
                evm: r.evm.map(|e| EvmFigures {
                    triggered: e.triggered,
                    committed: e.committed,
                    reassigned: e.reassigned,
                    lost_lumi_closed: e.lost_lumi_closed,
                }),
                triggered: r.triggered,
                excluded: r.excluded.clone(),
                trigger_fault: r
                    .trigger_fault
                    .as_ref()
                    .map(|f| TriggerFaultEnd { key: f.what.key().to_owned(), error: f.to_string() }),
                orphan_fragments: r
                    .orphan_fragments
                    .iter()
                    .map(|&(fed, fragments)| OrphanFragments { fed, fragments })
                    .collect(),
            }),
            Err(e) => Ended::Failed { error: e.to_string() },
        };
        RuEnd { unit: unit.to_owned(), problems, outcome }
    }

    /// The end an RU's process said, from its last JSON line, if it said one.
    pub fn read(report: &serde_json::Value) -> Option<Self> {
        serde_json::from_value(report.clone()).ok()
    }

    /// The EVM's figures, if this is the EVM's node and it ended with figures.
    pub fn evm(&self) -> Option<EvmFigures> {
        self.figures().and_then(|f| f.evm)
    }

    /// Its figures, if it ended with them.
    pub fn figures(&self) -> Option<&RuFigures> {
        match &self.outcome {
            Ended::Figures(f) => Some(f),
            Ended::Failed { .. } => None,
        }
    }
}

/// One JSON line, as the unit prints it. (Its fields are numbers, strings and lists: writing
/// them cannot fail.)
fn write_line(f: &mut std::fmt::Formatter<'_>, end: &impl Serialize) -> std::fmt::Result {
    f.write_str(&serde_json::to_string(end).map_err(|_| std::fmt::Error)?)
}

impl std::fmt::Display for RuEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_line(f, self)
    }
}

impl std::fmt::Display for BuEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_line(f, self)
    }
}

/// How a BU's process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuEnd {
    /// The unit's name in the system file.
    pub unit: String,
    /// Its figures, or why it failed.
    #[serde(flatten)]
    pub outcome: Ended<BuFigures>,
}

/// A BU's figures at its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuFigures {
    /// Events its last incarnation published.
    pub events_published: u64,
    /// Events (orbit mode: orbits) every incarnation published in the run, as its ledger says.
    #[serde(default)]
    pub published_in_run: u64,
    /// Events every incarnation published in the run (orbit mode: the events in its orbits).
    #[serde(default)]
    pub events_in_run: u64,
    /// Files every incarnation published in the run.
    #[serde(default)]
    pub files_in_run: u64,
    /// Push, a BU started again after its loss: the events it was given and never published,
    /// counted lost in its end-of-lumi records.
    #[serde(default)]
    pub lost_events: u64,
    /// Files its last incarnation published where readers see them.
    pub files_published: u64,
    /// Published events with a FED missing (orbit mode: orbits, a source's block missing).
    pub incomplete_events: u64,
    /// Orbit mode: blocks it left out of their orbits, per source (its id in decimal: a report
    /// is read back through a flattened map, whose keys are strings) and reason key.
    #[serde(default)]
    pub blocks_left_out: BTreeMap<String, BTreeMap<String, u64>>,
    /// Published events with a fragment error.
    pub error_events: u64,
    /// Its incarnation (0 the first, one more each start after a crash).
    pub incarnation: u64,
    /// Its run directory.
    pub run_dir: String,
    /// What its file broker granted, if it served one.
    pub broker: Option<BrokerTally>,
}

impl BuEnd {
    /// The end of BU `unit` from its node's result and its broker's figures.
    pub fn of(unit: &str, result: &Result<BuReport, NodeError>, broker: Option<BrokerTally>) -> Self {
        let outcome = match result {
            Ok(r) => Ended::Figures(BuFigures {
                events_published: r.events_published,
                published_in_run: r.published_in_run,
                events_in_run: r.events_in_run,
                files_in_run: r.files_in_run,
                lost_events: r.counters.lost_events,
                files_published: r.files_published,
                incomplete_events: r.counters.incomplete_events,
                blocks_left_out: r
                    .blocks_left_out
                    .iter()
                    .map(|(source, why)| (source.to_string(), why.iter().map(|(&k, &n)| (k.to_owned(), n)).collect()))
                    .collect(),
                error_events: r.counters.error_events,
                incarnation: u64::from(r.epoch),
                run_dir: r.run_dir.display().to_string(),
                broker,
            }),
            Err(e) => Ended::Failed { error: e.to_string() },
        };
        BuEnd { unit: unit.to_owned(), outcome }
    }

    /// The end a BU's process said, from its last JSON line, if it said one.
    pub fn read(report: &serde_json::Value) -> Option<Self> {
        serde_json::from_value(report.clone()).ok()
    }

    /// Its figures, if it ended with them.
    pub fn figures(&self) -> Option<&BuFigures> {
        match &self.outcome {
            Ended::Figures(f) => Some(f),
            Ended::Failed { .. } => None,
        }
    }
}

/// A BU's orbit blocks left out, in words: `source 5: 1 crc32c; source 7: 2 event_count`.
pub fn blocks_left_out_words<S: std::fmt::Display, K: std::fmt::Display>(
    left_out: &BTreeMap<S, BTreeMap<K, u64>>,
) -> String {
    let per_source: Vec<String> = left_out
        .iter()
        .map(|(source, why)| {
            let why: Vec<String> = why.iter().map(|(k, n)| format!("{n} {k}")).collect();
            format!("source {source}: {}", why.join(", "))
        })
        .collect();
    per_source.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_ru_end_reads_back_as_it_was_written_and_a_failure_keeps_its_reason() {
        let ended = RuEnd {
            unit: "ru-0".into(),
            problems: 2,
            outcome: Ended::Figures(RuFigures {
                fragments: 40,
                corrupt_fragments: 1,
                late_fragments: 0,
                parts_sent: 10,
                incomplete_parts: 1,
                evm: Some(EvmFigures { triggered: 10, committed: 9, reassigned: 1, lost_lumi_closed: 1 }),
                triggered: Some(10),
                excluded: vec![Excluded { bu: 1, from_event: 7, events_given: 3 }],
                trigger_fault: None,
                orphan_fragments: vec![OrphanFragments { fed: 3, fragments: 2 }],
            }),
        };
        let line: serde_json::Value = serde_json::from_str(&ended.to_string()).unwrap();
        // The line is flat, as the controller and the run's summary read it.
        assert_eq!(line["fragments"], json!(40));
        assert_eq!(line["evm"]["lost_lumi_closed"], json!(1));
        assert_eq!(RuEnd::read(&line), Some(ended.clone()));
        assert_eq!(ended.evm().map(|e| e.committed), Some(9));
        let failed = json!({"unit": "ru-1", "problems": 0, "error": "ru-1: the EVM hung up"});
        let read = RuEnd::read(&failed).expect("a failure reads back");
        assert_eq!(read.outcome, Ended::Failed { error: "ru-1: the EVM hung up".into() });
        assert_eq!(read.evm(), None);
        assert_eq!(RuEnd::read(&json!({"files": 3, "events": 30})), None, "an FU's report is no RU's end");
    }

    #[test]
    fn a_bu_end_reads_back_with_its_broker_and_without() {
        let ended = BuEnd {
            unit: "bu-1".into(),
            outcome: Ended::Figures(BuFigures {
                events_published: 500,
                published_in_run: 700,
                events_in_run: 700,
                files_in_run: 14,
                lost_events: 12,
                files_published: 10,
                incomplete_events: 3,
                blocks_left_out: BTreeMap::from([("5".to_owned(), BTreeMap::from([("crc32c".to_owned(), 1)]))]),
                error_events: 0,
                incarnation: 1,
                run_dir: "/ramdisk/run000077".into(),
                broker: Some(BrokerTally { events_deleted: 500, ..BrokerTally::default() }),
            }),
        };
        let line = serde_json::to_value(&ended).unwrap();
        assert_eq!(line["broker"]["events_deleted"], json!(500));
        assert_eq!(BuEnd::read(&line), Some(ended.clone()));
        let figures = ended.figures().unwrap();
        assert_eq!(blocks_left_out_words(&figures.blocks_left_out), "source 5: 1 crc32c");
        let failed = BuEnd::read(&json!({"unit": "bu-0", "error": "disk full"})).expect("a failure reads back");
        assert!(failed.figures().is_none());
    }
}
