//! The invariants: every event published once, whole and correctly flagged, and only once
//! written; every unit within its bounds; at the end, every event of the run accounted for.

use super::{Ev, World};
use std::collections::BTreeMap;
use tessera_evb::Ru;
use tessera_evb::types::{EventNumber, FedId, FileId};
use tessera_evb::unit::BuiltEvent;
use tessera_formats::fed::LV1_MASK;
use tessera_formats::frd::flags;
use tessera_formats::tcds::TCDS_FED_ID;

impl World {
    /// A BU renames a file into place: it must be written, and each of its events must be new,
    /// whole and correctly flagged.
    pub(super) fn publish(&mut self, b: u16, file: FileId) {
        let bu = usize::from(b);
        let Some(f) = self.bus[bu].files.remove(&file) else {
            self.violation(format!("BU {b} published file {file} that it does not hold"));
            return;
        };
        if !f.written {
            self.violation(format!("BU {b} published file {file} before its data was written"));
            return;
        }
        self.last_progress = self.now;
        *self.bus[bu].published_events.entry(f.lumi_section).or_default() += f.events.len() as u64;
        for event in &f.events {
            if let Some(other) = self.published.insert(event.event, file) {
                self.violation(format!(
                    "event {} published twice: BU {} file {} and BU {b} file {}",
                    event.event, other.bu, other, file
                ));
            }
            if event.lumi_section != f.lumi_section {
                self.violation(format!(
                    "event {} of lumi section {} in a file of {}",
                    event.event, event.lumi_section, f.lumi_section
                ));
            }
            self.check_event(event);
        }
        let incarnation = self.bus[bu].incarnation;
        self.schedule(self.now + 10_000, Ev::PublishDone { bu, file, incarnation });
    }

    pub(super) fn check_event(&mut self, e: &BuiltEvent) {
        let lv1 = (e.event as u32) & LV1_MASK;
        let mut missing_any = false;
        let mut corrupt_any = false;
        if e.parts.len() != self.ru_cfgs.len() {
            self.violation(format!("event {} has {} parts for {} RUs", e.event, e.parts.len(), self.ru_cfgs.len()));
            return;
        }
        let mut problems = Vec::new();
        for (r, part) in e.parts.iter().enumerate() {
            let mut seen: Vec<FedId> =
                part.fragments.iter().map(|f| f.fed).chain(part.missing.iter().copied()).collect();
            seen.sort_unstable();
            let mut expected = self.ru_cfgs[r].feds.clone();
            expected.sort_unstable();
            if seen != expected || part.event != e.event {
                problems.push(format!("RU {r} part holds FEDs {seen:?}, expected {expected:?}"));
            }
            for f in &part.fragments {
                if f.lv1 != lv1 {
                    problems.push(format!("FED {} sent LV1 {:#x} in event {}", f.fed, f.lv1, e.event));
                }
                corrupt_any |= self.corrupt.contains(&(f.fed, e.event));
                if f.fed == TCDS_FED_ID {
                    let expected_ls = self.trigger_info(e.event).lumi_section;
                    if e.lumi_section != expected_ls {
                        problems.push(format!("lumi section {} instead of {expected_ls}", e.lumi_section));
                    }
                }
            }
            missing_any |= !part.missing.is_empty();
        }
        if missing_any {
            self.tally.incomplete_events += 1;
            if self.sc.expects_complete_events() {
                problems.push("FEDs missing though no FED fault was injected".into());
            }
        }
        if (e.flags & flags::INCOMPLETE != 0) != missing_any {
            problems
                .push(format!("INCOMPLETE flag {} but missing FEDs {missing_any}", e.flags & flags::INCOMPLETE != 0));
        }
        if corrupt_any && e.flags & flags::FRAGMENT_ERROR == 0 {
            problems.push("a corrupt fragment without the FRAGMENT_ERROR flag".into());
        }
        for p in problems {
            self.violation(format!("event {}: {p}", e.event));
        }
    }

    pub(super) fn check_bounds(&mut self) {
        let mut found = Vec::new();
        let laws = std::iter::once(self.evm.evm.check_invariants())
            .chain(std::iter::once(&self.evm.ru).chain(self.rus.iter()).map(Ru::check_invariants));
        found.extend(laws.filter_map(Result::err).map(|broken| broken.to_string()));
        let rus = std::iter::once(&self.evm.ru).chain(self.rus.iter());
        for (r, ru) in rus.enumerate() {
            let max = self.ru_cfgs[r].max_events_buffered;
            if ru.events_buffered() > max {
                found.push(format!("RU {r} holds {} events, bound {max}", ru.events_buffered()));
            }
        }
        for (b, slot) in self.bus.iter().enumerate() {
            if let Some(u) = &slot.unit
                && u.events_in_flight() > self.bu_cfgs[b].max_events_in_flight
            {
                found.push(format!(
                    "BU {b} holds {} events, bound {}",
                    u.events_in_flight(),
                    self.bu_cfgs[b].max_events_in_flight
                ));
            }
        }
        let evm_bound = self.ru_cfgs[0].max_events_buffered;
        if self.evm.evm.events_in_flight() > evm_bound {
            found.push(format!("EVM tracks {} events, bound {evm_bound}", self.evm.evm.events_in_flight()));
        }
        for f in found {
            self.violation(f);
        }
    }

    pub(super) fn check_end(&mut self) {
        let first = self.sc.first_event;
        let events = self.run_events();
        let missing: Vec<EventNumber> =
            (first..first + events).filter(|e| !self.published.contains_key(e)).take(5).collect();
        if !missing.is_empty() {
            self.violation(format!("events never published, e.g. {missing:?}"));
        }
        if let Some((&event, file)) = self.published.range(first + events..).next() {
            self.violation(format!("event {event}, after the run's last, published in file {file}"));
        }
        let last = self.evm.evm.last_triggered();
        let seen: Vec<Option<EventNumber>> = self.rus.iter().map(Ru::run_last_event).collect();
        for (r, seen) in seen.into_iter().enumerate().filter(|&(_, seen)| seen != last) {
            self.violation(format!("RU {}: drained with last event {seen:?}, the EVM's is {last:?}", r + 1));
        }
        let lost = self.sc.faults.trigger_stream_lost;
        let broke = self.evm.trigger_break().map(ToString::to_string);
        match (lost, &broke, self.tally.trigger_breaks) {
            (true, Some(_), 1) | (false, None, 0) => {}
            _ => self.violation(format!(
                "trigger stream lost {lost}: the EVM's node said {} break(s), {broke:?}",
                self.tally.trigger_breaks
            )),
        }
        // What the RUs still hold is of events the trigger never issued, counted as orphans.
        self.tally.orphan_fragments = self.buffers.len() as u64;
        if lost && self.tally.orphan_fragments == 0 {
            self.violation("the data FEDs sent past the trigger's break, yet no orphan fragment is held".into());
        }
        // Each lumi section's EoLS records, summed over BUs, account for every event of it.
        let mut per_ls: BTreeMap<u32, u64> = BTreeMap::new();
        for e in first..first + events {
            *per_ls.entry(self.trigger_info(e).lumi_section).or_default() += 1;
        }
        for (ls, triggered) in per_ls {
            let recorded: u64 = self.bus.iter().filter_map(|b| b.end_of_lumis.get(&ls)).sum();
            if recorded != triggered {
                self.violation(format!(
                    "lumi section {ls}: EoLS records count {recorded} events, {triggered} were triggered"
                ));
            }
        }
    }
}
