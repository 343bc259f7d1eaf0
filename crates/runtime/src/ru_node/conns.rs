//! The RU's protocol connections: checking peers, judging their loss, carrying out the core's
//! outputs (data frames straight from the receive memory), and flushing without blocking. The
//! event loop (`crate::event_loop`) accepts and reads them.

use super::*;

impl RuLoop {
    /// A peer named itself: check that it may call this unit.
    pub(super) fn linked(&mut self, token: Token, peer: Peer) {
        let allowed = match peer {
            Peer::Evm => !self.is_evm(),
            Peer::Bu(b) => self.core.leader().is_some_and(|l| b < l.n_bu()),
            Peer::Ru(_) => false,
        };
        if !allowed || !self.io.admits(token) {
            self.io.refuse(token, &format!("RU {}", self.cfg.ru.ru), peer);
            return;
        }
        let address = self.io.conns[&token].address.clone();
        if peer == Peer::Evm
            && let Some(c) = self.io.conns.get_mut(&token)
        {
            for frame in self.evm_pending.drain(..) {
                c.queue(frame);
            }
        }
        // A peer that calls again (a restarted BU) replaces its old connection.
        let old: Vec<Token> =
            self.io.conns.iter().filter(|(t, c)| **t != token && c.peer == Some(peer)).map(|(t, _)| *t).collect();
        for t in old {
            if let Some(c) = self.io.close(t) {
                let old_address = c.address.clone();
                self.sent(c.into_unwritten());
                self.stats.problem(format!(
                    "{}: {peer} called again from {address}: its connection from {old_address} is replaced",
                    self.me(),
                ));
                let now = self.now();
                self.core.handle(now, Input::PeerLost(peer));
            }
        }
    }

    /// A connection ended (`why`, when it was not a plain close): a caller that never proved
    /// itself is refused; losing the EVM, an RU or a BU is judged by how far the run is.
    pub(super) fn close_conn(&mut self, token: Token, why: Option<String>) -> Result<(), NodeError> {
        let Some(conn) = self.io.close(token) else { return Ok(()) };
        let peer = conn.peer;
        self.sent(conn.into_unwritten());
        let Some(peer) = peer else {
            // A caller that never proved itself a unit of this run: nothing of it reached the
            // core. One that closed without a byte is no caller (a port probe).
            if let Some(why) = why {
                self.stats.links_refused.add(1);
                self.stats.problem(format!("{}: refused a connection: {why}", self.me()));
            }
            return Ok(());
        };
        match peer {
            Peer::Evm if !self.drain_seen() => {
                return Err(NodeError::EvmLost(why.unwrap_or_else(|| "closed by the EVM".into())));
            }
            Peer::Evm => {}
            Peer::Bu(b) => {
                // BUs leave at the run's end: only a BU lost before it is a problem. The EVM,
                // which reassigns a lost BU's events, judges by its own drain. Another RU judges
                // by the EVM's Drain, which may reach it after a BU's close at the run's end (two
                // connections): it says the loss only if no Drain follows within LOSS_PATIENCE.
                let line = format!(
                    "{}: lost BU {b}{}",
                    if self.is_evm() { "EVM".to_string() } else { format!("RU {}", self.cfg.ru.ru) },
                    why.map(|w| format!(": {w}")).unwrap_or_default()
                );
                if self.is_evm() && !self.core.leader().is_some_and(|l| l.drained()) {
                    self.stats.saw(SubState::Blocked);
                    self.stats.problem(line);
                } else if !self.is_evm() && !self.drain_seen() {
                    self.bus_lost.push((Instant::now(), line));
                }
                // Under push a BU closes once it has ended its run, after the drain: no loss (one
                // that fails after the drain fails its unit, which the run counts).
                let push_ended = self.core.frees_on_send() && self.core.leader().is_some_and(|l| l.drained());
                if self.is_evm() && !push_ended {
                    let now = self.now();
                    self.core.handle(now, Input::PeerLost(peer));
                }
            }
            // Every event needs every RU's part: without one, the run cannot go on.
            Peer::Ru(r) if !self.core.leader().is_some_and(|l| l.drained()) => {
                return Err(NodeError::RuLost(format!(
                    "RU {r}{}",
                    why.map(|w| format!(": {w}")).unwrap_or_else(|| ": it closed the connection".into())
                )));
            }
            Peer::Ru(_) => {}
        }
        Ok(())
    }

    /// Carries out the core's outputs.
    pub(super) fn dispatch(&mut self, _now: Nanos) {
        self.note_stop();
        while let Some(out) = self.core.poll_output() {
            match out {
                RuOutput::Send { to, msg: Message::Data { ru, epoch, parts, commits } } => {
                    self.send_data(to, ru, epoch, &parts, &commits);
                    // Encoded, or copied to send again later: their lists go back to the core.
                    self.core.ru_mut().recycle(parts);
                }
                RuOutput::Send { to, msg } => {
                    let mut frame = Vec::new();
                    if let Err(e) = encode(&msg, &mut frame) {
                        self.stats.problem(format!("{}: message not sent: {e}", self.me()));
                        continue;
                    }
                    self.stats.control_messages.add(1);
                    if let Some(c) = self.route(to) {
                        c.queue(frame);
                    } else if to == Peer::Evm && !self.is_evm() {
                        // Said before the EVM called: sent once it has.
                        if self.evm_pending.len() < MAX_EVM_PENDING {
                            self.evm_pending.push(frame);
                        } else {
                            self.stats
                                .problem(format!("{}: a message for the EVM dropped: it has not called", self.me()));
                        }
                    }
                }
                RuOutput::FreeBuffers(fragments) => {
                    for f in fragments {
                        match self.sending.get_mut(&f.buffer) {
                            // Still on its way out: released once written.
                            Some(s) => s.freed = true,
                            None => self.release(f.buffer),
                        }
                    }
                }
                RuOutput::Notice(Notice::TriggerStreamBroken { what, fragments, last_event }) => {
                    self.trigger_broke(what, fragments, last_event)
                }
                RuOutput::Notice(n) => {
                    self.count_fed_errors(&n);
                    // The first event without a FED left out for the rest of the run (masked, out
                    // of sync, its stream ended) says why; the later ones are counted per FED.
                    if let Notice::MissingFragments { feds, .. } = &n
                        && feds.iter().all(|&fed| self.left_out_for_good(fed))
                        && !feds.iter().fold(false, |new, &fed| self.missing_said.insert(fed) | new)
                    {
                        continue;
                    }
                    let text = match &n {
                        // The core does not know why a FED gave nothing; the streams say it.
                        Notice::MissingFragments { feds, .. } => {
                            let why: Vec<String> =
                                feds.iter().map(|&fed| format!("FED {fed} {}", self.why_missing(fed))).collect();
                            format!("{n}: {}", why.join(", "))
                        }
                        _ => n.to_string(),
                    };
                    self.stats.problem(format!("{}: {text}", self.me()))
                }
                // The EVM's node hands its RU's triggers to its EVM; no other RU reads the
                // trigger FED.
                RuOutput::Triggered { .. } => {}
            }
        }
    }

    /// Gives a fragment's memory back to its stream.
    fn release(&mut self, buffer: BufferRef) {
        let (stream, handle) = stream_handle(buffer);
        if let Some(b) = self.buffers.0.get_mut(stream) {
            b.release(handle);
        }
    }

    /// Push: the frames that carried these fragments are written (or their connection is
    /// gone): each fragment no other frame holds, and that the core has freed, is released.
    pub(super) fn sent(&mut self, fragments: Vec<BufferRef>) {
        for f in fragments {
            let Some(s) = self.sending.get_mut(&f) else { continue };
            s.queued -= 1;
            if s.queued == 0 {
                let freed = s.freed;
                self.sending.remove(&f);
                if freed {
                    self.release(f);
                }
            }
        }
    }

    /// The EVM's node stopped the trigger for a broken trigger stream: the fault, with where in
    /// the stream it happened, is the run's.
    pub(super) fn trigger_broke(&mut self, what: TriggerBreak, fragments: u64, last_event: Option<EventNumber>) {
        let Some(i) = self.cfg.ru.feds.iter().position(|&f| f == TCDS_FED_ID) else { return };
        let Some(s) = &self.streams[i] else { return };
        let stream_offset = match (&what, &s.broke) {
            (TriggerBreak::SyncLost { .. }, _) => s.last_offset,
            (_, Some((at, _))) => *at,
            _ => s.bytes,
        };
        let fault = TriggerFault { fed: TCDS_FED_ID, what, stream_offset, fragments, last_event };
        self.stats.problem(format!("EVM: {fault}"));
        self.trigger_fault = Some(fault);
    }

    /// Counts what a notice says of FEDs, per FED and as the unit's sub-states.
    pub(super) fn count_fed_errors(&mut self, notice: &Notice) {
        let errors = &self.stats.fed_errors;
        let count = |fed: FedId, kind: FedError| {
            if let Some(i) = errors.index_of(fed) {
                errors.add(i, kind, 1);
            }
        };
        match notice {
            Notice::SyncLoss { fed, .. } => {
                count(*fed, FedError::SyncLost);
                if let Some(i) = errors.index_of(*fed) {
                    self.left_out[i] = Some(LeftOut::SyncLost);
                }
                self.stats.saw(SubState::SyncLoss);
            }
            Notice::MissingFragments { feds, .. } => {
                for &fed in feds {
                    count(fed, FedError::Missing);
                }
                self.stats.saw(SubState::MissingData);
            }
            Notice::LateFragment { fed, .. } => count(*fed, FedError::Late),
            Notice::FedGivenUp { fed, .. } => count(*fed, FedError::GivenUp),
            &Notice::BuExcluded { bu, from_event, assigned } => {
                self.stats.bus_excluded.add(1);
                self.stats.events_to_excluded.add(assigned);
                self.excluded.push(Excluded { bu, from_event, events_given: assigned });
            }
            _ => {}
        }
    }

    /// Queues one data frame of `parts` to `to`.
    pub(super) fn send_data(&mut self, to: Peer, ru: u16, epoch: u32, parts: &[SuperFragment], commits: &[FileId]) {
        let bytes = parts.iter().map(SuperFragment::bytes).sum();
        // Sized first: collected from `flat_map`, it would grow a few times per message.
        let mut handles = Vec::with_capacity(parts.iter().map(|p| p.fragments.len()).sum());
        handles.extend(parts.iter().flat_map(|p| &p.fragments).map(|f| f.buffer));
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(handles.len());
        for &h in &handles {
            self.buffers.pieces(h, &mut pieces);
        }
        // Room for every descriptor, so that the header is written without growing.
        let mut header = Vec::with_capacity(64 + 16 * parts.len() + 26 * handles.len());
        if let Err(e) = encode_data_header_pieces(ru, epoch, parts, commits, &pieces, &mut header) {
            self.stats.problem(format!("RU {}: data message not sent: {e}", self.cfg.ru.ru));
            return;
        }
        drop(pieces);
        self.stats.data_messages.add(1);
        let frees_on_send = self.core.frees_on_send();
        if self.route(to).is_some() {
            if frees_on_send {
                for &h in &handles {
                    self.sending.entry(h).or_default().queued += 1;
                }
            }
            let c = self.io.conn_to(to).expect("routed just now");
            if frees_on_send {
                c.track_written();
            }
            c.queue_data(header, handles, bytes);
        } else {
            self.stats.saw(SubState::Blocked);
            let Peer::Bu(b) = to else { return };
            if frees_on_send {
                // Push sends once: what a BU cannot take is lost with it, and RU 0 excludes
                // it from an event on.
                self.parts_unreachable += parts.len() as u64;
                if self.unreachable_said.insert(b) {
                    self.stats.problem(format!(
                        "{}: cannot reach BU {b}: its super-fragments are dropped until RU 0 excludes it",
                        self.me()
                    ));
                }
                return;
            }
            if self.is_evm() {
                // A BU reaches the EVM's node on its own connection; without it, the BU is
                // lost and the EVM reassigns its events.
                self.stats.problem(format!("EVM: BU {b} is not connected; its events are reassigned"));
                return;
            }
            if !self.bus_down.contains_key(&b) {
                self.stats.problem(format!(
                    "RU {}: cannot reach BU {b}: its super-fragments are sent again once it is back, or go \
                     where the EVM reassigns their events",
                    self.cfg.ru.ru
                ));
            }
            let (_, parts_kept) = self.bus_down.entry(b).or_insert_with(|| (Instant::now(), Vec::new()));
            parts_kept.extend(parts.iter().map(|p| (epoch, p.clone())));
        }
    }

    /// Sends the BUs this RU could not reach what it could not send them, every [`BU_RETRY`]:
    /// the super-fragments of events still theirs (not reassigned by the EVM, not released),
    /// under the incarnation they were for. A try that fails keeps them for the next.
    pub(super) fn retry_bus_down(&mut self) {
        let due: Vec<u16> =
            self.bus_down.iter().filter(|(_, (at, _))| at.elapsed() >= BU_RETRY).map(|(&b, _)| b).collect();
        for b in due {
            let Some((_, parts)) = self.bus_down.remove(&b) else { continue };
            let ru = self.core.ru();
            let mut by_epoch: BTreeMap<u32, Vec<SuperFragment>> = BTreeMap::new();
            for (epoch, part) in parts {
                if ru.assignment(part.event) == Some((b, epoch)) {
                    by_epoch.entry(epoch).or_default().push(part);
                }
            }
            let (max_parts, max_bytes) = (ru.config().max_parts_per_message, ru.config().max_data_bytes);
            for (epoch, parts) in by_epoch {
                for batch in data_batches(parts, max_parts, max_bytes) {
                    self.send_data(Peer::Bu(b), self.cfg.ru.ru, epoch, &batch, &[]);
                }
            }
        }
    }

    /// The connection that carries messages to `to`, reconnecting to a BU whose data connection
    /// was lost (a restarted BU listens again on the same port).
    pub(super) fn route(&mut self, to: Peer) -> Option<&mut Conn> {
        // Under push a lost BU never comes back: no call to it (a dead host's would block).
        if self.io.conn_to(to).is_none()
            && !self.core.frees_on_send()
            && let Peer::Bu(b) = to
            && let Some(&address) = self.cfg.bu_data.get(usize::from(b))
        {
            // One short try: a BU that is down gets its events reassigned by the EVM.
            if let Ok(s) = std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200))
                && s.set_nodelay(true).is_ok()
                && s.set_nonblocking(true).is_ok()
            {
                let _ = self.io.open(TcpStream::from_std(s), to);
            }
        }
        self.io.conn_to(to)
    }

    /// Flushes the connections; one that has taken nothing for a while blocks the unit, one that
    /// broke is closed.
    pub(super) fn flush_conns(&mut self) -> Result<(), NodeError> {
        let stalls = &mut self.stalls;
        let broken = self.io.flush(&self.buffers, |token, moved, after| stalls.flushed(token, moved, after));
        if self.core.frees_on_send() {
            let written: Vec<BufferRef> = self.io.conns.values_mut().flat_map(Conn::take_written).collect();
            self.sent(written);
        }
        // Connections closed elsewhere (a peer lost or replaced) no longer count.
        let conns = &self.io.conns;
        self.stalls.keep(|token| conns.contains_key(token));
        if self.stalls.blocked(Instant::now()) {
            self.stats.saw(SubState::Blocked);
        }
        for (token, why) in broken {
            self.close_conn(token, Some(why))?;
        }
        Ok(())
    }
}

/// Connections with bytes waiting that took none at their last flush, and since when: a unit
/// with a connection that has taken nothing for [`BLOCKED_AFTER`] is [`SubState::Blocked`].
#[derive(Debug, Default)]
pub(super) struct Stalls(BTreeMap<Token, Instant>);

impl Stalls {
    /// `token`'s connection moved `moved` bytes since its last flush, and has `after` queued.
    pub(super) fn flushed(&mut self, token: Token, moved: usize, after: usize) {
        if after > 0 && moved == 0 {
            self.0.entry(token).or_insert_with(Instant::now);
        } else {
            self.0.remove(&token);
        }
    }

    /// Forgets the connections that `open` does not hold.
    pub(super) fn keep(&mut self, open: impl Fn(&Token) -> bool) {
        self.0.retain(|token, _| open(token));
    }

    /// Whether a connection has taken nothing for [`BLOCKED_AFTER`] at `now`.
    pub(super) fn blocked(&self, now: Instant) -> bool {
        self.0.values().any(|&since| now.saturating_duration_since(since) >= BLOCKED_AFTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_that_takes_nothing_for_a_while_blocks_its_unit_and_one_that_moves_does_not() {
        let mut stalls = Stalls::default();
        let (a, b) = (Token(CONN_TOKENS), Token(CONN_TOKENS + 1));
        stalls.flushed(a, 0, 100);
        stalls.flushed(b, 60, 40);
        let now = Instant::now();
        assert!(!stalls.blocked(now), "not yet");
        assert!(stalls.blocked(now + BLOCKED_AFTER), "a has taken nothing");
        stalls.flushed(a, 0, 100);
        assert!(stalls.blocked(now + BLOCKED_AFTER), "still stalled since the first flush");
        // Bytes a transport took between flushes (UCX sends that ended) count as moving.
        stalls.flushed(a, 10, 100);
        assert!(!stalls.blocked(now + BLOCKED_AFTER), "a moved");
        stalls.flushed(b, 0, 40);
        stalls.keep(|t| *t != b);
        assert!(!stalls.blocked(now + 10 * BLOCKED_AFTER), "b is closed");
        stalls.flushed(a, 0, 0);
        assert!(!stalls.blocked(now + 10 * BLOCKED_AFTER));
    }
}
