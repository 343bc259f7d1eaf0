//! The invariants: every event published once, whole and correctly flagged, and only once
//! written; every unit within its bounds and keeping its own laws; at the end, every event of the run accounted for. In
//! orbit mode also each orbit's blocks as the BU's writer judges them, and every event of every
//! orbit in a file (or its orbit counted empty).

/// The run number the simulated sources write in their orbit headers.
const SIM_RUN: u32 = 1;

use super::{Ev, OrbitTally, World};
use std::collections::BTreeMap;
use tessera_evb::types::{EventNumber, FedId, FileId};
use tessera_evb::unit::BuiltEvent;
use tessera_formats::fed::LV1_MASK;
use tessera_formats::frd::flags;
use tessera_formats::orbit::{BlockKey, agree};
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
        if self.sc.orbit.is_some() {
            let ls = self.published_orbits.entry(f.lumi_section).or_default();
            ls.events += f.orbits.events;
            ls.empty_orbits += f.orbits.empty_orbits;
            self.tally.orbit_events += f.orbits.events;
            self.tally.empty_orbits += f.orbits.empty_orbits;
        }
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

    /// Orbit mode: what BU `b`'s writer makes of the orbits of a file, judged by the rule the
    /// runtime's writer applies ([`agree`]) to the blocks as the sources sent them: the orbit's
    /// events must be the trigger source's, exactly the short blocks are left out, and an orbit
    /// is written only with events.
    pub(super) fn judge_orbits(&mut self, b: u16, orbits: &[BuiltEvent]) -> OrbitTally {
        let mut tally = OrbitTally::default();
        if self.sc.orbit.is_none() {
            return tally;
        }
        for orbit in orbits {
            let number = self.trigger_info(orbit.event).orbit as u32;
            let sources: Vec<FedId> = orbit.parts.iter().flat_map(|p| &p.fragments).map(|f| f.fed).collect();
            // Event ids in walking order, last first; a short block lacks the orbit's last event.
            let ids: Vec<Vec<u64>> = sources
                .iter()
                .map(|&s| {
                    (0..u64::from(self.block_events(s, orbit.event))).rev().map(|k| (orbit.event << 12) + k).collect()
                })
                .collect();
            let keys: Vec<Option<BlockKey<'_>>> = ids
                .iter()
                .map(|ids| {
                    Some(BlockKey { run: SIM_RUN, orbit: number, event_count: ids.len() as u16, event_ids: ids })
                })
                .collect();
            let verdict = agree(&keys, sources.iter().position(|&s| s == TCDS_FED_ID));
            let events = self.orbit_events[(orbit.event - self.sc.first_event) as usize];
            let mut problems = Vec::new();
            if verdict.events != events {
                problems.push(format!("written with {} events, it has {events}", verdict.events));
            }
            for &(i, d) in &verdict.left_out {
                if !self.short_blocks.contains(&(sources[i], orbit.event)) {
                    problems.push(format!("source {}'s whole block left out ({d})", sources[i]));
                }
            }
            for &i in &verdict.kept {
                if self.short_blocks.contains(&(sources[i], orbit.event)) {
                    problems.push(format!("source {}'s block, one event short, written", sources[i]));
                }
            }
            if verdict.is_written() == (events == 0) {
                problems.push(format!("written {} with {events} events", verdict.is_written()));
            }
            for p in problems {
                self.violation(format!("BU {b}, orbit {} (index {}): {p}", number, orbit.event));
            }
            self.tally.blocks_left_out += verdict.left_out.len() as u64;
            if !verdict.left_out.is_empty() && orbit.flags & flags::INCOMPLETE == 0 {
                tally.made_incomplete += 1;
            }
            if verdict.is_written() {
                tally.events += u64::from(verdict.events);
            } else {
                tally.empty_orbits += 1;
            }
        }
        tally
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
            if self.sc.push.is_some() && part.fragments.is_empty() && part.missing.is_empty() {
                // Push: the BU aged the event before this RU's part came. An RU sends its events
                // in order and, without a give-up time, waits for every FED still sending: with
                // its throttle holding the trigger, no part of it can be that late.
                missing_any = true;
                if self.sc.give_up_ns.is_none() {
                    problems.push(format!("shipped without RU {r}'s part, though no RU gives up on a FED"));
                }
                continue;
            }
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
            // A FED is left out only once its stream ended, it was masked or lost sync (or, with
            // a give-up time, it paused past it): never for being silent, late or slow.
            for &fed in &part.missing {
                let Some(s) = self.ru_cfgs[r].feds.iter().position(|&f| f == fed).map(|i| &self.sources[r][i]) else {
                    continue;
                };
                let gone = s.gone_from.is_some_and(|from| e.event >= from);
                let given_up = self.sc.give_up_ns.is_some() && s.stall.is_some();
                if !gone && !given_up {
                    problems.push(format!(
                        "went out without FED {fed}, whose stream neither ended nor was masked (gone from {:?})",
                        s.gone_from
                    ));
                }
            }
        }
        if missing_any {
            self.tally.incomplete_events += 1;
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

    /// Every unit's own laws (the EVM's, each RU's and each live BU's `check_invariants`), and
    /// the bounds seen from outside; run after every step (every few, in large systems).
    pub(super) fn check_bounds(&mut self) {
        let mut found: Vec<String> = self.readout.check_invariants().iter().map(ToString::to_string).collect();
        for r in 0..self.readout.len() {
            let ru = self.readout.ru(r);
            let max = self.ru_cfgs[r].max_events_buffered;
            if ru.events_buffered() > max {
                found.push(format!("RU {r} holds {} events, bound {max}", ru.events_buffered()));
            }
        }
        for slot in &self.bus {
            if let Some(Err(e)) = slot.unit.as_ref().map(tessera_evb::Bu::check_invariants) {
                found.push(e.to_string());
            }
        }
        // The trigger makes no event before every stream of every RU is connected.
        if self.all_named_at.is_none() && (self.readout.last_triggered().is_some() || self.readout.started()) {
            found.push("the run started before every stream had connected".into());
        }
        let evm_bound = self.ru_cfgs[0].max_events_buffered;
        let (evm_events, _) = self.readout.evm_state();
        if evm_events > evm_bound {
            found.push(format!("EVM tracks {evm_events} events, bound {evm_bound}"));
        }
        for f in found {
            self.violation(f);
        }
    }

    pub(super) fn check_end(&mut self) {
        let first = self.sc.first_event;
        let events = self.run_events();
        // Under push, the events given to a lost BU and never published are lost with it.
        let lost = self.lost_with_bus();
        self.tally.lost_events = lost.len() as u64;
        let missing: Vec<EventNumber> = (first..first + events)
            .filter(|e| !self.published.contains_key(e) && !lost.contains_key(e))
            .take(5)
            .collect();
        if !missing.is_empty() {
            self.violation(format!("events never published nor counted lost, e.g. {missing:?}"));
        }
        for &(bu, from, assigned) in &self.push.excluded.clone() {
            let published = self.published.range(first..from).filter(|(_, f)| f.bu == bu).count() as u64;
            let lost_here = lost.values().filter(|&&b| b == bu).count() as u64;
            if published + lost_here > assigned {
                self.violation(format!(
                    "BU {bu} was given {assigned} events before its exclusion at {from}; {published} published and \
                     {lost_here} lost are more"
                ));
            }
            // Started again, it counted the same loss in its end-of-lumi records.
            let in_records = self.bus[usize::from(bu)].lost_in_records;
            if self.bus[usize::from(bu)].ended && in_records != lost_here {
                self.violation(format!(
                    "BU {bu}'s end-of-lumi records count {in_records} events lost, the run {lost_here}"
                ));
            }
        }
        if let Some((&event, file)) = self.published.range(first + events..).next() {
            self.violation(format!("event {event}, after the run's last, published in file {file}"));
        }
        let last = self.readout.last_triggered();
        let seen: Vec<Option<EventNumber>> =
            (1..self.readout.len()).map(|r| self.readout.ru(r).run_last_event()).collect();
        for (r, seen) in seen.into_iter().enumerate().filter(|&(_, seen)| seen != last) {
            self.violation(format!("RU {}: drained with last event {seen:?}, the EVM's is {last:?}", r + 1));
        }
        let stream_lost = self.sc.faults.trigger_stream_lost;
        let broke = self.readout.trigger_break().map(ToString::to_string);
        match (stream_lost, &broke, self.tally.trigger_breaks) {
            (true, Some(_), 1) | (false, None, 0) => {}
            _ => self.violation(format!(
                "trigger stream lost {stream_lost}: the EVM's node said {} break(s), {broke:?}",
                self.tally.trigger_breaks
            )),
        }
        // A FED that paused longer than the RUs' windows take to fill held the trigger, and the
        // time was counted as dead time.
        let window_ns = self.sc.ru_window_events as u64 * self.sc.trigger_interval_ns * 3 / 2;
        if self.sc.give_up_ns.is_none()
            && self.sc.push.is_none()
            && self.longest_pause > window_ns
            && self.tally.dead_time_ns < self.longest_pause - window_ns
        {
            self.violation(format!(
                "a FED paused {} µs, more than the {} µs a window of events lasts, yet only {} µs of dead time was \
                 counted",
                self.longest_pause / 1000,
                window_ns / 1000,
                self.tally.dead_time_ns / 1000
            ));
        }
        // What the RUs still hold is of events the trigger never issued, counted as orphans.
        self.tally.orphan_fragments = self.buffers.len() as u64;
        if stream_lost && self.tally.orphan_fragments == 0 {
            self.violation("the data FEDs sent past the trigger's break, yet no orphan fragment is held".into());
        }
        // Each lumi section's EoLS records, summed over BUs, account for every event of it;
        // under push, with what a lost BU published before it wrote no more, and what it lost.
        let mut per_ls: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for e in first..first + events {
            let ls = per_ls.entry(self.trigger_info(e).lumi_section).or_default();
            ls.0 += 1;
            ls.1 += u64::from(lost.contains_key(&e));
        }
        for (ls, (triggered, lost_in_ls)) in per_ls {
            let recorded: u64 = self.bus.iter().filter_map(|b| b.end_of_lumis.get(&ls)).sum();
            let unrecorded: u64 = self
                .push
                .excluded
                .iter()
                .filter(|x| !self.bus[usize::from(x.0)].end_of_lumis.contains_key(&ls))
                .map(|x| self.published.values().filter(|f| f.bu == x.0 && f.lumi_section == ls).count() as u64)
                .sum();
            if recorded + unrecorded + lost_in_ls != triggered {
                self.violation(format!(
                    "lumi section {ls}: EoLS records count {recorded} events (and {unrecorded} published and \
                     {lost_in_ls} lost by lost BUs), {triggered} were triggered"
                ));
            }
        }
        // Orbit mode: each lumi section's files hold every event of its orbits, and its empty
        // orbits are counted.
        if self.sc.orbit.is_some() {
            let mut drawn: BTreeMap<u32, OrbitTally> = BTreeMap::new();
            for e in first..first + events {
                let ls = drawn.entry(self.trigger_info(e).lumi_section).or_default();
                match self.orbit_events[(e - first) as usize] {
                    0 => ls.empty_orbits += 1,
                    n => ls.events += u64::from(n),
                }
            }
            for (ls, drawn) in drawn {
                let published = self.published_orbits.get(&ls).copied().unwrap_or_default();
                if published != drawn {
                    self.violation(format!(
                        "lumi section {ls}: files hold {} events and {} empty orbits were counted; its orbits had {} \
                         events and {} empty orbits",
                        published.events, published.empty_orbits, drawn.events, drawn.empty_orbits
                    ));
                }
            }
        }
    }
}
