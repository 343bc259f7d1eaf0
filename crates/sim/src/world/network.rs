//! The units' inputs and outputs: what each unit is given, what it outputs carried out (files
//! written, buffers freed, notices counted), and the network between them, which delays messages
//! and lets connections overtake each other while keeping order within one, as TCP does.

use super::{Ev, SimFile, World};
use std::cmp::Reverse;
use tessera_evb::msg::{Message, SuperFragment};
use tessera_evb::types::{Nanos, Peer};
use tessera_evb::unit::{BuOutput, Input, Notice, RuOutput};
use tessera_evb::{Bu, BuDisk};

impl World {
    /// Starts (or restarts) BU `bu`: partial files in `open/` are deleted; complete, unpublished
    /// ones are offered to the EVM.
    pub(super) fn start_bu(&mut self, bu: usize) {
        let slot = &mut self.bus[bu];
        if slot.unit.is_some() {
            return;
        }
        slot.files.retain(|_, f| f.written);
        // What the BU reads off its disk: names, headers, and the records it has written.
        let disk = BuDisk {
            unpublished: slot.files.iter().map(|(&id, f)| (id, f.events.len() as u32)).collect(),
            next_index: slot.next_index.clone(),
            // As the runtime's ledger gives them: every lumi section's, the ended ones too.
            published_events: slot.end_of_lumis.iter().chain(&slot.published_events).map(|(&ls, &n)| (ls, n)).collect(),
            lumis_done: slot.end_of_lumis.keys().copied().collect(),
        };
        slot.unit = Some(Bu::new(self.bu_cfgs[bu].clone(), slot.incarnation, disk));
        self.drain_outputs(Peer::Bu(bu as u16));
    }
    /// Gives `input` to `node` and carries out what it outputs.
    pub(super) fn feed(&mut self, node: Peer, input: Input) {
        match node {
            Peer::Bu(b) => match self.bus[usize::from(b)].unit.as_mut() {
                Some(unit) => unit.handle(self.now, input),
                None => return,
            },
            _ => self.readout.handle(self.now, node, input),
        }
        self.drain_outputs(node);
    }

    /// Delivers `msg` from `from` to BU `b`. Under push a BU reads no data message that would
    /// begin events while it has no room for them: it stays unread on its connection, in order
    /// with what follows it, until the BU takes it ([`Bu::takes`], as the runtime's BU does).
    pub(super) fn deliver_to_bu(&mut self, from: Peer, b: u16, msg: Message) {
        let to = Peer::Bu(b);
        let bu = usize::from(b);
        if self.sc.push.is_some() {
            let takes = self.bus[bu].unit.as_ref().is_some_and(|u| u.takes(&msg));
            let queue = self.push.unread.entry((from, to)).or_default();
            if !queue.is_empty() || !takes {
                queue.push_back(msg);
                self.tally.held_messages += 1;
                self.schedule_read(bu);
                return;
            }
        }
        self.feed(to, Input::Message { from, msg });
    }

    fn schedule_read(&mut self, bu: usize) {
        if self.push.read_scheduled.insert(bu) {
            self.schedule(self.now + 50_000, Ev::BuRead { bu });
        }
    }

    /// Push: BU `bu` reads what it left unread, connection by connection, while it has room.
    pub(super) fn read_unread(&mut self, bu: usize) {
        let to = Peer::Bu(bu as u16);
        let connections: Vec<(Peer, Peer)> = self.push.unread.keys().filter(|k| k.1 == to).copied().collect();
        for key in connections {
            while let Some(unit) = self.bus[bu].unit.as_ref() {
                let Some(queue) = self.push.unread.get_mut(&key) else { break };
                if queue.front().is_none_or(|m| !unit.takes(m)) {
                    break;
                }
                let msg = queue.pop_front().expect("front checked");
                self.feed(to, Input::Message { from: key.0, msg });
            }
        }
        self.push.unread.retain(|_, q| !q.is_empty());
        if self.push.unread.keys().any(|k| k.1 == to) {
            self.schedule_read(bu);
        }
    }

    pub(super) fn poll_ru(&mut self, node: Peer) -> Option<RuOutput> {
        self.readout.poll(node)
    }

    pub(super) fn next_timeout(&self, node: Peer) -> Option<Nanos> {
        match node {
            Peer::Bu(b) => self.bus[usize::from(b)].unit.as_ref()?.next_timeout(),
            _ => self.readout.next_timeout(node),
        }
    }

    pub(super) fn drain_outputs(&mut self, node: Peer) {
        match node {
            Peer::Bu(b) => {
                while let Some(out) = self.bus[usize::from(b)].unit.as_mut().and_then(Bu::poll_output) {
                    self.bu_output(b, out);
                }
            }
            _ => {
                while let Some(out) = self.poll_ru(node) {
                    self.ru_output(node, out);
                }
            }
        }
        if let Some(at) = self.next_timeout(node) {
            // One tick per node at a time, never sooner than 10 µs from now.
            let at = at.max(self.now + 10_000);
            let scheduled = self.tick_generation.get(&node).map(|&(_, t)| t);
            if scheduled.is_none_or(|t| at < t) {
                let generation = self.seq + 1;
                self.tick_generation.insert(node, (generation, at));
                self.seq += 1;
                self.queue.push(Reverse((at, generation)));
                self.pending.insert(generation, Ev::Tick { node, generation });
            }
        }
    }

    pub(super) fn ru_output(&mut self, node: Peer, out: RuOutput) {
        match out {
            RuOutput::Send { to, msg } => self.send(node, to, msg),
            // The EVM's node keeps its RU's triggers; a plain RU reads no trigger FED.
            RuOutput::Triggered { event, .. } => {
                self.violation(format!("{node:?} passed on the trigger of event {event}"))
            }
            RuOutput::FreeBuffers(fragments) => {
                for f in fragments {
                    match self.buffers.remove(&f.buffer) {
                        Some((ru, fed, _)) => self.sources[ru][fed].held -= 1,
                        None => self.violation(format!("{node:?} freed buffer {:?} twice", f.buffer)),
                    }
                }
            }
            RuOutput::Notice(n) => self.notice(n),
        }
    }

    pub(super) fn notice(&mut self, notice: Notice) {
        match &notice {
            Notice::ProtocolError { what } => self.violation(format!("protocol error: {what}")),
            Notice::SyncLoss { .. } => self.tally.sync_losses += 1,
            Notice::LateFragment { .. } => self.tally.late_fragments += 1,
            Notice::TriggerStreamBroken { .. } => self.tally.trigger_breaks += 1,
            Notice::FedGivenUp { .. } if self.sc.give_up_ns.is_none() => {
                self.violation(format!("{notice:?} though no give-up time is set"))
            }
            Notice::MissingFragments { .. }
            | Notice::FedGivenUp { .. }
            | Notice::FedMasked { .. }
            | Notice::LateTrigger { .. } => {}
            Notice::EventAged { .. } => self.tally.aged_events += 1,
            Notice::LatePart { .. } => self.tally.late_parts += 1,
            &Notice::BuExcluded { bu, from_event, assigned } => self.push.excluded.push((bu, from_event, assigned)),
        }
    }

    pub(super) fn bu_output(&mut self, b: u16, out: BuOutput) {
        match out {
            BuOutput::Send { to, msg } => self.send(Peer::Bu(b), to, msg),
            BuOutput::WriteFile { file, lumi_section, events } => {
                let orbits = self.judge_orbits(b, &events);
                // Orbit files cost their bytes too, at 8 GB/s.
                let bytes = self.sc.orbit.map_or(0, |_| {
                    events.iter().flat_map(|e| &e.parts).flat_map(|p| &p.fragments).map(|f| u64::from(f.bytes)).sum()
                });
                let slot = &mut self.bus[usize::from(b)];
                // What a restarted BU learns from the names of the files on its disk.
                let next = slot.next_index.entry(file.lumi_section).or_default();
                *next = (*next).max(file.index + 1);
                let cost = if slot.slow { 20 } else { 1 } * (200_000 + 5_000 * events.len() as u64 + bytes / 8);
                let incarnation = slot.incarnation;
                if slot.files.insert(file, SimFile { lumi_section, events, written: false, orbits }).is_some() {
                    self.violation(format!("BU {b} wrote file {file} twice"));
                }
                self.schedule(self.now + cost, Ev::WriteDone { bu: usize::from(b), file, incarnation });
            }
            BuOutput::PublishFile(file) => self.publish(b, file),
            BuOutput::DiscardFile(file) => {
                if self.bus[usize::from(b)].files.remove(&file).is_none() {
                    self.violation(format!("BU {b} discarded file {file} that it does not hold"));
                }
            }
            BuOutput::EndOfLumi { lumi_section, events, lost } => {
                let slot = &mut self.bus[usize::from(b)];
                slot.lost_in_records += lost;
                let published = slot.published_events.remove(&lumi_section).unwrap_or(0);
                let again = slot.end_of_lumis.insert(lumi_section, events).is_some();
                if again {
                    self.violation(format!("BU {b} wrote the EoLS of lumi section {lumi_section} twice"));
                } else if published != events {
                    self.violation(format!(
                        "BU {b} EoLS of lumi section {lumi_section} says {events} events, it published {published}"
                    ));
                }
            }
            BuOutput::EndOfRun { last_lumi_section, .. } => {
                let slot = &mut self.bus[usize::from(b)];
                let missing: Vec<u32> =
                    (1..=last_lumi_section).filter(|ls| !slot.end_of_lumis.contains_key(ls)).collect();
                let again = std::mem::replace(&mut slot.ended, true);
                if again {
                    self.violation(format!("BU {b} wrote the EoR twice"));
                } else if !missing.is_empty() {
                    self.violation(format!("BU {b} wrote the EoR without the EoLS of lumi sections {missing:?}"));
                }
            }
            BuOutput::Notice(n) => self.notice(n),
        }
    }

    pub(super) fn send(&mut self, from: Peer, to: Peer, msg: Message) {
        if let Message::Data { ru, parts, .. } = &msg {
            let bound = self.ru_cfgs[usize::from(*ru)].max_data_bytes;
            let bytes: usize = parts.iter().map(SuperFragment::bytes).sum();
            if parts.len() > 1 && bytes > bound {
                self.violation(format!("RU {ru} sent {bytes} fragment bytes in one data message, bound {bound}"));
            }
        }
        self.tally.messages += 1;
        self.tally.control_messages += u64::from(msg.is_control());
        let incarnation = match to {
            Peer::Bu(b) => {
                let slot = &self.bus[usize::from(b)];
                if slot.unit.is_none() {
                    return; // the connection is gone
                }
                slot.incarnation
            }
            _ => 0,
        };
        // Order is kept within a connection, as TCP does; connections overtake each other.
        let delay = 20_000 + self.rng.below(self.sc.faults.network_jitter_ns + 1);
        let at = (self.now + delay).max(self.last_delivery.get(&(from, to)).copied().unwrap_or(0));
        self.last_delivery.insert((from, to), at);
        self.schedule(at, Ev::Deliver { from, to, msg, incarnation });
    }
}
