//! The RU's FEROL streams: accepting front ends, naming each stream by its FED, reading it into
//! its receive memory, offering its fragments to the core, and judging its end.

use super::*;

impl RuLoop {
    /// A FEROL stream has ended (closed, or broken and reported): a data FED's clean close
    /// before its expected end is a disconnect, reported now; the trigger stream's end before
    /// run control stopped the trigger is a fault of the run ([`TriggerFault`]).
    pub(super) fn stream_settled(&mut self, i: usize) {
        let fed = self.cfg.ru.feds[i];
        let Some(s) = &self.streams[i] else { return };
        let (fragments, bytes, last_lv1, broke) = (s.fragments, s.bytes, s.last_lv1, s.broke.clone());
        if fed == TCDS_FED_ID && self.is_evm() {
            // The trigger's expected end is the run's limit or the stop line, never the events
            // triggered so far; the EVM's node judges the end against it.
            let limit = [self.cfg.event_limit, self.io.control.stop_line()].into_iter().flatten().min();
            let now = self.now();
            let node = self.core.leader_mut().expect("RU 0's node");
            if let Some(n) = limit {
                node.limit_trigger(n);
            }
            node.trigger_stream_ended(now, broke.map(|(_, why)| why));
            self.dispatch(now);
            return;
        }
        // A broken stream was reported as it broke; a FED out of sync is left out already (the
        // core's notices of what this stream brought are taken first).
        self.dispatch(self.now());
        let clean = self.clean_end_at().is_some_and(|n| fragments >= n);
        if broke.is_none() && self.left_out[i].is_none() && !clean {
            self.left_out[i] = Some(LeftOut::Disconnected);
            self.stats.fed_errors.add(i, FedError::Disconnected, 1);
            self.stats.saw(SubState::FedDisconnected);
            self.stats.problem(format!(
                "RU {}: FED {fed} disconnected: its stream closed after {fragments} fragments, {bytes} bytes \
                 (last LV1 {last_lv1:?}), before the run's end; the events after it go on without FED {fed}",
                self.cfg.ru.ru
            ));
        }
        if !clean {
            // Its events go on without it now: an ended stream brings nothing more.
            let now = self.now();
            self.core.stream_changed(now, i, StreamChange::Ended);
            self.dispatch(now);
        }
    }

    /// Accepts front ends. Each stream waits, unregistered, until its first block header names
    /// its FED (see [`RuLoop::name_streams`]); a client that sends nothing cannot stall the loop.
    /// The intake's rule ([`Intake`]) says who may wait: every configured front end always has
    /// room, whatever the order, and strangers cannot hold more than a few places.
    pub(super) fn accept_ferol(&mut self) {
        let Some(listener) = &self.ferol else { return };
        while let Ok((stream, addr)) = listener.accept() {
            if let Err(why) = self.intake.accept() {
                self.stats.problem(format!("RU {}: FEROL connection from {addr} refused: {why}", self.cfg.ru.ru));
                continue;
            }
            let _ = stream.set_nodelay(true);
            self.unnamed.push((stream, addr, Instant::now()));
        }
    }

    /// Gives each waiting front-end connection whose first block header is in its FED's stream,
    /// and refuses those that name no FED of this RU, close, or say nothing for too long.
    pub(super) fn name_streams(&mut self) {
        let mut i = 0;
        while i < self.unnamed.len() {
            let (stream, addr, since) = &self.unnamed[i];
            let mut head = [0u8; HEADER_BYTES];
            let fed = match stream.peek(&mut head) {
                Ok(HEADER_BYTES) => Some(match self.cfg.framing {
                    Framing::Ferol => FerolBlockHeader::parse(&head, 0).map(|h| h.fed_id).map_err(|e| e.to_string()),
                    Framing::Dth { .. } => DthBlockHeader::parse(&head, 0).map_err(|e| e.to_string()).and_then(|h| {
                        u16::try_from(h.source_id).map_err(|_| format!("source id {} is not a FED id", h.source_id))
                    }),
                }),
                Ok(0) => Some(Err("closed before its first block header".into())),
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => Some(Err(e.to_string())),
                _ if since.elapsed() > NAME_TIMEOUT => {
                    Some(Err(format!("no whole block header in {} s", NAME_TIMEOUT.as_secs())))
                }
                _ => None,
            };
            let Some(fed) = fed else {
                i += 1;
                continue;
            };
            let refused = format!("RU {}: FEROL connection from {addr} refused", self.cfg.ru.ru);
            let (mut stream, _, _) = self.unnamed.swap_remove(i);
            let index = match fed {
                Ok(fed) => self.intake.name(fed).map_err(|why| format!("{refused}: {why}")),
                Err(e) => {
                    self.intake.forget_unnamed();
                    Err(format!("{refused}: {e}"))
                }
            };
            match index {
                Ok(f) => {
                    let token = Token(STREAM_BASE + f);
                    if let Err(e) = self.io.registry().register(&mut stream, token, Interest::READABLE) {
                        self.stats.problem(format!("{refused}: {e}"));
                        continue;
                    }
                    self.streams[f] = Some(FerolConn {
                        stream,
                        readable: true,
                        ended: false,
                        broke: None,
                        settled: false,
                        fragments: 0,
                        bytes: 0,
                        last_offset: 0,
                        last_lv1: None,
                    });
                    let now = self.now();
                    self.core.stream_changed(now, f, StreamChange::Connected);
                    self.stats.set_streams_missing(self.core.ru().unconnected_feds());
                }
                Err(why) => self.stats.problem(why),
            }
        }
    }

    /// Reads the FEROL streams that have bytes and room; true if some have more to give.
    pub(super) fn read_streams(&mut self, now: Nanos) -> Result<bool, NodeError> {
        let mut more = false;
        let mut blocked = false;
        let ru = self.cfg.ru.ru;
        // A stream whose memory is full holds back the streams that are ahead of it: they would
        // otherwise bring (with the trigger) events that it cannot deliver in time. Streams
        // behind it go on: the events it waits to have committed need them.
        let full_at = (0..self.streams.len())
            .filter_map(|i| {
                let s = self.streams[i].as_ref()?;
                (!s.ended && s.broke.is_none() && !self.buffers.0[i].has_room()).then_some(s.fragments)
            })
            .min();
        for i in 0..self.streams.len() {
            let Some(s) = &mut self.streams[i] else { continue };
            let fed = self.cfg.ru.feds[i];
            if fed == TCDS_FED_ID && trigger_off(&*self.core) {
                // The trigger is off: a trigger fragment not yet taken is of an event after the
                // run's last, and its front end is held back as a stopped trigger would be.
                continue;
            }
            let buffer = &mut self.buffers.0[i];
            let mut taken = 0;
            // The trigger stream, read by the EVM's node, which stops the trigger when it breaks.
            let trigger = fed == TCDS_FED_ID && self.cfg.evm.is_some();
            loop {
                // Fragments already received go first, as far as the core takes them.
                while s.broke.is_none() && !(trigger && trigger_off(&*self.core)) && self.core.accepts(i) {
                    match buffer.next_fragment() {
                        None => {
                            if s.ended && buffer.pending_bytes() > 0 {
                                let why = format!(
                                    "closed inside a fragment, {} bytes after its fragment {} (last LV1 {:?})",
                                    buffer.pending_bytes(),
                                    s.fragments,
                                    s.last_lv1
                                );
                                self.stats.broken_streams.add(1);
                                self.stats.fed_errors.add(i, FedError::StreamBroken, 1);
                                self.stats.problem(format!("RU {ru}: FED {fed} stream {why}"));
                                s.broke = Some((s.bytes, why));
                            }
                            break;
                        }
                        Some(Ok(r)) => {
                            s.fragments += 1;
                            s.last_offset = r.stream_offset;
                            s.bytes = r.stream_offset + u64::from(r.handle.wire_len);
                            s.last_lv1 = Some(r.lv1);
                            self.stats.fragment_bytes.add(r.fragment_len as u64);
                            let fragment = to_fragment_ref(i, fed, &r, buffer, &mut self.last_trigger);
                            if fragment.corrupt {
                                self.stats.fed_errors.add(i, FedError::Corrupt, 1);
                            }
                            // A fragment that claims another FED's id is marked as CMS's
                            // receiving board marks it: no reader can take it for that FED's.
                            // (An orbit block is passed on as it came, flagged in the protocol.)
                            let wrong_id = r.source_id != u32::from(fed);
                            if wrong_id && r.orbit.is_none() {
                                buffer.flag_wrong_fed_id(r.handle);
                            }
                            if let Some(p) = &r.problem {
                                let flagged = if wrong_id && r.orbit.is_none() {
                                    "passed on flagged, its trailer's F bit (unexpected FED id) set"
                                } else {
                                    "passed on flagged"
                                };
                                self.stats.problem(format!(
                                    "RU {ru}: {} stream byte {}: {p}; {flagged}",
                                    received_name(fed, &r),
                                    r.stream_offset
                                ));
                            }
                            let accepted = self.core.offer_fragment(now, i, fragment);
                            debug_assert!(accepted.is_ok(), "accepts() said yes");
                        }
                        Some(Err(e)) => {
                            self.stats.broken_streams.add(1);
                            self.stats.fed_errors.add(i, FedError::StreamBroken, 1);
                            let broke = (e.stream_offset, e.error.to_string());
                            let err = NodeError::Stream {
                                ru,
                                fed: e.fed,
                                stream_offset: e.stream_offset,
                                fragments: s.fragments,
                                last_lv1: s.last_lv1,
                                error: Box::new(e.error),
                            };
                            if self.cfg.on_corrupt_stream == CorruptStreamPolicy::Fail {
                                return Err(err);
                            }
                            self.stats.problem(format!("{err}; the rest of the stream is thrown away"));
                            s.broke = Some(broke);
                        }
                    }
                }
                if s.ended || (trigger && trigger_off(&*self.core)) {
                    break;
                }
                if s.broke.is_some() {
                    // Read and thrown away: a front end held back by a stream that nobody reads
                    // would hold back the trigger in a real system.
                    if !s.readable || taken >= STREAM_TURN_BYTES {
                        more |= s.readable;
                        break;
                    }
                    match s.stream.read(&mut self.scratch) {
                        Ok(0) => {
                            s.ended = true;
                            let _ = self.io.registry().deregister(&mut s.stream);
                        }
                        Ok(n) => taken += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.readable = false,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => {
                            s.ended = true;
                            let _ = self.io.registry().deregister(&mut s.stream);
                        }
                    }
                    continue;
                }
                // A stream this RU does not read is held back, not silent: no event gives up on
                // it meanwhile (it would otherwise be declared stalled with its bytes unread).
                let held = !self.core.accepts(i) || full_at.is_some_and(|n| s.fragments >= n);
                if held {
                    self.core.ru_mut().stream_alive(i, now);
                    blocked = true;
                    break;
                }
                if !s.readable || taken >= STREAM_TURN_BYTES {
                    more |= s.readable;
                    break;
                }
                let Some(spare) = buffer.spare() else {
                    self.core.ru_mut().stream_alive(i, now);
                    blocked = true;
                    break;
                };
                let room = spare.len().min(self.cfg.framing.read_bytes());
                match s.stream.read(&mut spare[..room]) {
                    Ok(0) => {
                        s.ended = true;
                        let _ = self.io.registry().deregister(&mut s.stream);
                    }
                    Ok(n) => {
                        taken += n;
                        buffer.filled(n);
                        self.core.ru_mut().stream_alive(i, now);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.readable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.stats.problem(format!("RU {ru}: FED {fed} stream: {e}"));
                        s.ended = true;
                        let _ = self.io.registry().deregister(&mut s.stream);
                    }
                }
            }
            // A stream's end is looked at once all of it is offered: the trigger stream's clean
            // end is the trigger's end, anything else a fault; a data FED's early close is a
            // disconnect.
            let settled = !s.settled && (s.broke.is_some() || (s.ended && buffer.pending_bytes() == 0));
            s.settled |= settled;
            if settled {
                self.stream_settled(i);
            }
        }
        self.stats.set_throttle(if self.core.held_by_window() {
            Throttle::PushWindow
        } else if blocked {
            Throttle::BuffersFull
        } else if self.core.push_throttled() {
            Throttle::PushHighWater
        } else {
            Throttle::None
        });
        Ok(more)
    }

    /// Whether `fed` is left out for the rest of the run: masked, out of sync, or its stream
    /// ended.
    pub(super) fn left_out_for_good(&self, fed: FedId) -> bool {
        let i = self.cfg.ru.feds.iter().position(|&f| f == fed);
        let state = i.and_then(|i| self.core.ru().fed_state(i));
        matches!(state, Some(FedState::Masked | FedState::SyncLost | FedState::Ended))
    }

    /// Why `fed` gave no fragment for an event sent on without it, in a few words.
    pub(super) fn why_missing(&self, fed: FedId) -> &'static str {
        let Some(i) = self.cfg.ru.feds.iter().position(|&f| f == fed) else { return "is not read here" };
        match (self.left_out[i], &self.streams[i]) {
            (Some(LeftOut::SyncLost), _) => "lost sync",
            (Some(LeftOut::Disconnected), _) => "disconnected",
            (None, None) => "is not connected",
            (None, Some(s)) if s.broke.is_some() => "has a broken stream",
            (None, Some(_)) => match self.core.ru().fed_state(i) {
                Some(FedState::Masked) => "is masked",
                _ => "sent nothing within the give-up time (ru.silent_fed_give_up_ms)",
            },
        }
    }
}

/// A received fragment in a problem's words: `FED 7 fragment with LV1 12,` or `source 7 orbit 4096`.
fn received_name(fed: FedId, r: &Received) -> String {
    match &r.orbit {
        Some(h) => format!("source {fed} orbit {},", h.orbit),
        None => format!("FED {fed} fragment with LV1 {},", r.lv1),
    }
}

/// The protocol's view of a received fragment: the FED the stream is configured for, its LV1,
/// where its bytes are, and for the trigger FED the lumi section, orbit and BX (in orbit mode
/// from its orbit header: the lumi section CMSSW's rule gives the orbit, docs/formats.md §3).
fn to_fragment_ref(
    stream: usize,
    fed: FedId,
    r: &Received,
    buffer: &StreamBuffer,
    last: &mut Option<TriggerInfo>,
) -> FragmentRef {
    let mut corrupt = r.problem.is_some();
    let trigger = (fed == TCDS_FED_ID).then(|| {
        if let Some(h) = &r.orbit {
            let orbit = u64::from(h.orbit);
            let info = TriggerInfo { lumi_section: lumi_section_of_orbit(orbit), orbit, bx: 0 };
            *last = Some(info);
            return info;
        }
        match trigger_record(buffer, r.handle) {
            Some(rec) => {
                let info = TriggerInfo { lumi_section: rec.lumi_section, orbit: rec.orbit, bx: rec.bx };
                *last = Some(info);
                info
            }
            // A trigger fragment that does not parse still makes an event: it is flagged corrupt
            // and takes the lumi section of the trigger before it.
            None => {
                corrupt = true;
                let previous = last.unwrap_or(TriggerInfo { lumi_section: 1, orbit: 0, bx: 0 });
                TriggerInfo { bx: r.bx, ..previous }
            }
        }
    });
    FragmentRef {
        fed,
        lv1: r.lv1,
        bytes: r.fragment_len as u32,
        corrupt,
        buffer: buffer_ref(stream, r.handle),
        trigger,
    }
}

/// The trigger record of the fragment at `handle`, if it is one: its blocks' data gathered on the
/// stack (a record is [`TCDS_FRAGMENT_BYTES`]; a longer fragment is none), not on the heap, as
/// this is done for every event.
fn trigger_record(buffer: &StreamBuffer, handle: FragmentHandle) -> Option<TcdsRecord> {
    let mut bytes = [0u8; TCDS_FRAGMENT_BYTES];
    let mut len = 0;
    for piece in buffer.segments(handle) {
        bytes.get_mut(len..len + piece.len())?.copy_from_slice(piece);
        len += piece.len();
    }
    TcdsRecord::parse(&bytes[..len]).ok().map(|(record, _)| record)
}
