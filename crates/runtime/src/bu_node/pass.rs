//! The BU's part of each pass of its event loop (see `crate::event_loop`): its RAM disk and the
//! filter farm before the clock, its writers' and bookkeeping thread's results after the tick,
//! the store's room for what the RUs send, and the rules of the EVM's going.

use super::*;

impl Unit for BuLoop {
    type Report = BuReport;

    fn event_loop(&mut self) -> &mut EventLoop {
        &mut self.io
    }

    fn aborted(&self) -> NodeError {
        NodeError::Aborted(format!("{} events in flight", self.core.events_in_flight()))
    }

    /// The Stop once the core drains; then what the watcher saw of the RAM disk and the filter
    /// farm, the throttle that makes, and the files that may go to the writers.
    fn prepare(&mut self) -> Result<(), NodeError> {
        self.update_intake();
        if self.core.draining() && self.stats.state() == UnitState::Enabled {
            self.stats.transition(Transition::Stop);
        }
        let looks: Vec<_> = self.watcher.iter().flat_map(|w| w.looks()).collect();
        let h = &mut self.held;
        for look in looks {
            if let Some(space) = look.space
                && let Some(room) = &mut self.room
            {
                room.look(look.at, space);
            }
            if let Some(full) = look.space.and_then(|s| s.used_percent()) {
                self.stats.ramdisk_used_percent.set(u64::from(full));
                if !h.ramdisk_high && full >= self.cfg.ramdisk_high_water_percent {
                    h.ramdisk_high = true;
                    self.stats.problem(format!("BU {}: RAM disk {full}% full: RAMDISK_HIGH_WATER", self.cfg.bu.bu));
                } else if h.ramdisk_high && full <= self.cfg.ramdisk_low_water_percent {
                    h.ramdisk_high = false;
                }
            }
            if let (Some(limits), Some(summaries)) = (&self.cfg.farm_limits, look.summaries) {
                let now_ms = now_unix_ms();
                let pressure = assess(&summaries, now_ms, h.started.elapsed(), limits);
                self.stats.fu_cpu_ms.set((h.farm_cpu.update(&summaries) * 1e3) as u64);
                let live: Vec<_> = summaries
                    .iter()
                    .filter(|s| now_ms.saturating_sub(s.updated_unix_ms) <= limits.stale_after.as_millis() as u64)
                    .collect();
                self.stats.fu_processes.set(live.len() as u64);
                self.stats.fu_free_slots.set(live.iter().map(|s| u64::from(s.free_slots)).sum());
                self.stats
                    .fu_queued_lumi_sections
                    .set(live.iter().map(|s| u64::from(s.queued_lumi_sections)).max().unwrap_or(0));
                self.stats.fu_output_bytes_per_s.set(live.iter().map(|s| s.output_bytes_per_s as u64).sum());
                if let Some(p) = &pressure
                    && h.farm.as_ref().is_none_or(|f: &FarmPressure| f.key() != p.key())
                {
                    self.stats.problem(format!("BU {}: {p}", self.cfg.bu.bu));
                }
                h.farm = pressure;
            }
        }
        let now_throttle = if self.waits_for_room || self.deferred.is_some() {
            Throttle::RamdiskFull
        } else if h.ramdisk_high {
            Throttle::RamdiskHighWater
        } else {
            h.farm.as_ref().map_or(Throttle::None, Throttle::of_farm)
        };
        if now_throttle != h.throttle {
            h.throttle = now_throttle;
            let now = self.io.now();
            self.core.set_throttle(now, (now_throttle != Throttle::None).then(|| now_throttle.key()));
        }
        self.update_room();
        self.hand_to_writers()?;
        let held = self.held_for_room(self.held.throttle);
        if matches!(held, Throttle::RamdiskFull | Throttle::RamdiskHighWater) {
            let since = *self.held.disk_held.get_or_insert_with(Instant::now);
            if since.elapsed() >= DISK_HELD_SAID_AFTER && !self.held.disk_held_said {
                self.held.disk_held_said = true;
                self.say_disk_held(held, since.elapsed());
            }
        } else {
            self.held.disk_held = None;
            self.held.disk_held_said = false;
        }
        Ok(())
    }

    fn next_timeout(&self) -> Option<Nanos> {
        self.core.next_timeout()
    }

    fn tick(&mut self, now: Nanos) {
        self.core.handle(now, Input::Tick);
    }

    /// The core's outputs, then what the writers and the bookkeeping thread finished.
    fn step(&mut self, _now: Nanos) -> Result<bool, NodeError> {
        self.feed_unread();
        self.dispatch()?;
        self.collect_written()?;
        self.collect_books()?;
        Ok(false)
    }

    /// Room comes back as the writers finish; their completion wakes the loop. Under push,
    /// what comes is not asked for: a connection whose last message read waits for room (it
    /// brings new events, see `BuLoop::feed_unread`) is not read on, nor is any while the disk
    /// or the farm holds the BU back, and TCP holds the RUs. Another RU's messages that only
    /// complete the events held are still read: the events held can always complete. A capped
    /// BU (benchmarks) also reads nothing while it is ahead of its rate.
    fn may_read(&self, token: Token) -> bool {
        self.store_has_room()
            && self.unread.get(&token).is_none_or(VecDeque::is_empty)
            && (self.cfg.bu.push.is_none() || self.held.throttle == Throttle::None)
            && self.intake.as_ref().is_none_or(Intake::open)
    }

    fn read_conn(&mut self, token: Token, _now: Nanos) -> Result<bool, NodeError> {
        let more = BuLoop::read_conn(self, token);
        self.update_intake();
        more
    }

    /// A capped BU that waits for its rate wakes when it may read again.
    fn max_wait(&self) -> Duration {
        match &self.intake {
            Some(i) if !i.open() => i.wait(),
            _ => crate::event_loop::MAX_SLEEP,
        }
    }

    fn close_conn(&mut self, token: Token, why: Option<String>) -> Result<(), NodeError> {
        BuLoop::close_conn(self, token, why)
    }

    fn settle(&mut self) -> Result<(), NodeError> {
        self.dispatch()
    }

    fn flush_conns(&mut self) -> Result<(), NodeError> {
        BuLoop::flush_conns(self);
        Ok(())
    }

    fn publish_stats(&mut self) {
        BuLoop::publish_stats(self, self.held_for_room(self.held.throttle))
    }

    /// After its end-of-run record the BU still acknowledges its last end-of-lumi records; the
    /// EVM closes the connection once it has them all. The EVM may close as soon as it has
    /// every acknowledgement, while this BU's end-of-run record is still on its way to the
    /// disk: that is no loss, for a while. Under push there is nothing to acknowledge: the BU
    /// ends with its record, and its close tells RU 0 it is done.
    fn done(&mut self) -> Result<Option<BuReport>, NodeError> {
        if self.ended {
            let since = *self.held.ended_at.get_or_insert_with(Instant::now);
            if self.cfg.bu.push.is_some() || !self.evm_connected() || since.elapsed() > FINAL_ACK_WAIT {
                return Ok(Some(BuReport {
                    counters: self.core.counters(),
                    events_published: self.published,
                    published_in_run: self.core.published_in_run(),
                    events_in_run: self.events_before
                        + if self.cfg.orbits { self.orbit_events } else { self.published },
                    files_in_run: self.files_before + self.files_published,
                    orbit_events: self.orbit_events,
                    orbits_written: self.orbits_written,
                    files_published: self.files_published,
                    blocks_left_out: self.blocks_left_out.clone(),
                    run_dir: self.run_dir.clone(),
                    epoch: self.epoch,
                }));
            }
        } else if !self.evm_connected() {
            let gone = *self.held.evm_gone_at.get_or_insert_with(Instant::now);
            if !self.core.run_ended() || gone.elapsed() > FINAL_ACK_WAIT {
                return Err(NodeError::EvmLostBeforeEnd {
                    bu: self.cfg.bu.bu,
                    why: Some("it closed the connection".into()),
                    pending: self.core.pending(),
                });
            }
        }
        Ok(None)
    }
}
