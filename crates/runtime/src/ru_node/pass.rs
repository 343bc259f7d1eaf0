//! The RU's part of each pass of its event loop (see `crate::event_loop`): run control's stop
//! of the trigger, its FEROL streams, its peers' messages, retrying the BUs it could not reach,
//! and the end of its run.

use super::*;

impl Unit for RuLoop {
    type Report = RuReport;

    fn event_loop(&mut self) -> &mut EventLoop {
        &mut self.io
    }

    fn aborted(&self) -> NodeError {
        NodeError::Aborted(self.core.leader().map(|l| l.pending()).unwrap_or_default())
    }

    fn prepare(&mut self) -> Result<(), NodeError> {
        if self.io.control.take_stop_trigger() {
            self.stop_trigger();
        }
        self.take_masks();
        self.check_streams_connected()
    }

    fn next_timeout(&self) -> Option<Nanos> {
        self.core.next_timeout()
    }

    fn tick(&mut self, now: Nanos) {
        self.core.handle(now, Input::Tick);
    }

    /// The core's outputs, then the front ends: naming new streams, reading the named ones.
    fn step(&mut self, now: Nanos) -> Result<bool, NodeError> {
        self.dispatch(now);
        if !self.unnamed.is_empty() {
            self.name_streams();
        }
        if !self.peers_ready() {
            return Ok(false);
        }
        self.read_streams(now)
    }

    fn read_conn(&mut self, token: Token, now: Nanos) -> Result<bool, NodeError> {
        let mut inputs = Vec::new();
        let Some(pass) = self.io.read(token, |peer, decoded, _frame| {
            inputs.push((peer, decoded.message));
        }) else {
            return Ok(false);
        };
        if let Some(peer) = pass.linked {
            self.linked(token, peer);
        }
        for (from, msg) in inputs {
            self.core.handle(now, Input::Message { from, msg });
        }
        if let Some(why) = pass.closed {
            self.close_conn(token, why.map(|e| e.to_string()))?;
        }
        Ok(pass.more)
    }

    fn close_conn(&mut self, token: Token, why: Option<String>) -> Result<(), NodeError> {
        RuLoop::close_conn(self, token, why)
    }

    /// The core's outputs, then the BUs: sending again to those it could not reach, and saying
    /// those lost without the EVM's Drain after [`LOSS_PATIENCE`].
    fn settle(&mut self) -> Result<(), NodeError> {
        self.dispatch(self.now());
        self.retry_bus_down();
        if self.drain_seen() {
            self.bus_lost.clear();
        }
        while self.bus_lost.first().is_some_and(|(at, _)| at.elapsed() >= LOSS_PATIENCE) {
            let (_, line) = self.bus_lost.remove(0);
            self.stats.saw(SubState::Blocked);
            self.stats.problem(line);
        }
        Ok(())
    }

    fn flush_conns(&mut self) -> Result<(), NodeError> {
        RuLoop::flush_conns(self)
    }

    fn publish_stats(&mut self) {
        RuLoop::publish_stats(self);
        self.look_at_waits();
    }

    /// The EVM's node ends once drained, its last messages flushed and its lost BUs back (or
    /// given up on); an RU once the EVM closed after its Drain; an ingest-only RU once its
    /// streams have ended and every event is freed.
    fn done(&mut self) -> Result<Option<RuReport>, NodeError> {
        if trigger_off(&*self.core)
            && let Some(evm) = self.core.leader()
            && !evm.drained()
        {
            // A drain that takes long says what it waits for, every DRAIN_REPORT.
            let since = *self.ending.stopped_at.get_or_insert_with(Instant::now);
            if since.elapsed() >= DRAIN_REPORT * (self.ending.drain_reports + 1) {
                self.ending.drain_reports += 1;
                let pending = evm.pending();
                self.stats.problem(format!(
                    "{}: still draining after {:.0} s: {pending}",
                    self.me(),
                    since.elapsed().as_secs_f64()
                ));
            }
        }
        if let Some(evm) = self.core.leader()
            && evm.drained()
        {
            let lost = evm.bus_lost();
            let at = *self.ending.drained_at.get_or_insert_with(Instant::now);
            if !lost.is_empty() && !self.ending.lost_said {
                self.ending.lost_said = true;
                self.stats.problem(format!(
                    "EVM: drained; waiting up to {LOST_BU_GRACE:?} for BUs {lost:?}, lost during the run, to come \
                     back for their end of run"
                ));
            }
            let flushed = self.io.conns.values().all(|c| c.queued_bytes() == 0) || at.elapsed() > FINAL_FLUSH;
            // Push: RU 0 sends its last parts, then waits for the BUs to end (each closes its
            // connection after its end-of-run record): it closing first would fail them.
            let push_done = !self.core.frees_on_send()
                || (self.core.ru().events_buffered() == 0
                    && !self.io.conns.values().any(|c| matches!(c.peer, Some(Peer::Bu(_)))))
                || at.elapsed() > LOST_BU_GRACE;
            if flushed && push_done && (lost.is_empty() || at.elapsed() > LOST_BU_GRACE) {
                return Ok(Some(self.report()));
            }
        }
        // Another RU ends once RU 0 has closed its connection after the drain, under push too:
        // under push RU 0 closes only once the BUs have ended, that is once they have every
        // RU's part (an RU that ended as soon as it had sent its own parts could end before its
        // FEDs had delivered the run's last events).
        if !self.is_evm() && self.drain_seen() && !self.io.conns.values().any(|c| c.peer == Some(Peer::Evm)) {
            return Ok(Some(self.report()));
        }
        if self.cfg.ingest_only && self.ingested_all() {
            return Ok(Some(self.report()));
        }
        Ok(None)
    }

    /// Connections waiting to name their FED are not registered: the loop looks again soon.
    fn max_wait(&self) -> Duration {
        if self.unnamed.is_empty() { MAX_SLEEP } else { Duration::from_millis(1) }
    }

    fn on_event(&mut self, token: Token, _event: &mio::event::Event) -> Result<(), NodeError> {
        match token {
            FEROL_LISTENER => self.accept_ferol(),
            Token(t) if (STREAM_BASE..CONN_TOKENS).contains(&t) => {
                if let Some(Some(s)) = self.streams.get_mut(t - STREAM_BASE) {
                    s.readable = true;
                }
            }
            _ => {}
        }
        Ok(())
    }
}
