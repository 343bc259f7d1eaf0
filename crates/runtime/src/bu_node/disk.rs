//! The BU's disk: the writer threads that write its files, and the room on its RAM disk that
//! decides how many events it asks for.

use super::*;

impl BuLoop {
    /// Moves jobs from the backlog to the writers' queue while it has room, and while the RAM
    /// disk has room for each file (in order: files are written in the order the core made
    /// them).
    pub(super) fn hand_to_writers(&mut self) -> Result<(), NodeError> {
        let jobs = self.jobs.as_ref().expect("writers run while the loop does");
        while let Some(job) = self.backlog.pop_front() {
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                self.backlog.push_front(job);
                return Ok(());
            }
            self.retry_at = None;
            if let Some(room) = &mut self.room
                && !room.fits(job.bytes, self.writing_bytes)
            {
                // Files at the writers free their frames when done, and wake the loop; with none
                // there, only others can make room: look again in a while.
                self.waits_for_room = true;
                let wait = if self.writing_bytes == 0 { DISK_FULL_RETRY } else { crate::ramdisk::SPACE_CHECK };
                self.retry_at = Some(Instant::now() + wait);
                if self.writing_bytes == 0 && !std::mem::replace(&mut self.disk_full_said, true) {
                    let free = room.space().map_or(0, |s| s.free_bytes);
                    self.stats.problem(format!(
                        "BU {}: RAM disk full: {} has {:.2} MB free, a file of {:.2} MB waits for room (RAMDISK_FULL)",
                        self.cfg.bu.bu,
                        room.directory().display(),
                        free as f64 / 1e6,
                        job.bytes as f64 / 1e6
                    ));
                }
                self.backlog.push_front(job);
                return Ok(());
            }
            let bytes = job.bytes;
            match jobs.try_send(job) {
                Ok(()) => self.writing_bytes += bytes,
                Err(TrySendError::Full(job)) => {
                    self.backlog.push_front(job);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => {
                    return Err(NodeError::ThreadGone { bu: self.cfg.bu.bu, what: "the writer threads are" });
                }
            }
        }
        self.waits_for_room = false;
        Ok(())
    }

    /// Bounds the core's events to what its RAM disk has room for, as it is now.
    pub(super) fn update_room(&mut self) {
        let Some(room) = &mut self.room else { return };
        if let Some(events) = room.events(self.cfg.bu.request_batch_events) {
            let now = self.io.now();
            self.core.set_room(now, events);
        }
    }

    /// What holds the BU back, `throttle` or its RAM disk's room if that keeps it from asking.
    /// Before it knows how large events are, the one batch its room grants holds it back for
    /// want of their sizes, not of room: that is not said as a full RAM disk.
    pub(super) fn held_for_room(&self, throttle: Throttle) -> Throttle {
        let Some(room) = &self.room else { return throttle };
        let waits_for_sizes = room.grants_first_batch(self.cfg.bu.request_batch_events);
        if throttle == Throttle::None && !waits_for_sizes && self.core.short_of_room() {
            Throttle::RamdiskFull
        } else {
            throttle
        }
    }

    /// Says that the BU has held back for its RAM disk for `how_long`, how full it is, and what
    /// would free it: the filter farm, or with none (`fu.enabled: false`) only someone removing
    /// files; until then the run takes no more events from this BU and cannot drain.
    pub(super) fn say_disk_held(&mut self, held: Throttle, how_long: Duration) {
        let Some(room) = &self.room else { return };
        let space = room.space();
        let directory = room.directory().display().to_string();
        let free = space.map_or("?".to_owned(), |s| {
            format!("{:.1} of {:.1} MB free", s.free_bytes as f64 / 1e6, s.total_bytes as f64 / 1e6)
        });
        let what_frees_it = if self.cfg.farm_limits.is_some() {
            "it waits for the filter farm to remove files"
        } else {
            "no filter farm reads this BU (fu.enabled: false): unless something else removes its files, it takes \
             no more events and the run cannot drain; stop the run (Ctrl-C)"
        };
        self.stats.problem(format!(
            "BU {}: held back for {:.0} s by its RAM disk ({}): {directory} has {free}, \
             bu.ramdisk_high_water_percent {} %; {what_frees_it}",
            self.cfg.bu.bu,
            how_long.as_secs_f64(),
            held.key(),
            self.cfg.ramdisk_high_water_percent
        ));
    }

    /// Takes the writers' finished files: their frames are freed and the core told. A file that
    /// found the disk full goes back to the head of the backlog, to be written again when there
    /// is room.
    pub(super) fn collect_written(&mut self) -> Result<(), NodeError> {
        loop {
            match self.done.try_recv() {
                Ok((job, Err(e), at, space)) if e.is_disk_full() => {
                    self.writing_bytes = self.writing_bytes.saturating_sub(job.bytes);
                    if let (Some(room), Some(space)) = (&mut self.room, space) {
                        room.look(at, space);
                    }
                    if !std::mem::replace(&mut self.disk_full_said, true) {
                        self.stats.problem(format!(
                            "BU {}: RAM disk full: {e}; the file is removed and written again when there is room \
                             (RAMDISK_FULL)",
                            self.cfg.bu.bu
                        ));
                    }
                    self.waits_for_room = true;
                    self.retry_at = Some(Instant::now() + DISK_FULL_RETRY);
                    self.backlog.push_front(job);
                }
                Ok((job, result, at, space)) => {
                    let written = result?;
                    for left in &written.left_out {
                        self.stats.problem(format!("BU {}: {left}", self.cfg.bu.bu));
                        *self.blocks_left_out.entry(left.source).or_default().entry(left.reason).or_default() += 1;
                    }
                    self.stats.orbit_blocks_left_out.add(written.left_out.len() as u64);
                    let Job { file, events, frames, bytes } = job;
                    drop(frames);
                    self.disk_full_said = false;
                    self.writing -= 1;
                    self.writing_bytes = self.writing_bytes.saturating_sub(bytes);
                    self.store.written(events.iter().flat_map(|e| &e.parts).flat_map(|p| &p.fragments));
                    if let Some(room) = &mut self.room {
                        room.written(file, events.len() as u32);
                        if let Some(space) = space {
                            room.look(at, space);
                        }
                    }
                    let now = self.now();
                    if written.orbits_made_incomplete > 0 {
                        let orbits = written.orbits_made_incomplete;
                        self.core.handle(now, Input::OrbitsLeftIncomplete { file, orbits });
                    }
                    self.core.handle(now, Input::FileWritten(file));
                    self.core.recycle(events);
                    self.hand_to_writers()?;
                    self.dispatch()?;
                }
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) if self.writing == 0 => return Ok(()),
                Err(TryRecvError::Disconnected) => {
                    return Err(NodeError::ThreadGone { bu: self.cfg.bu.bu, what: "a writer thread is" });
                }
            }
        }
    }
}

/// A writer thread: writes the files of the jobs it takes, and after each looks at the disk
/// (off the loop, which takes the look with the result).
pub(super) fn write_files(
    jobs: Arc<std::sync::Mutex<Receiver<Job>>>,
    done: SyncSender<Done>,
    writer: RawWriter,
    run_dir: &Path,
    waker: Arc<Waker>,
) {
    loop {
        let job = match jobs.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let result = writer.write(job.file, &job.events, &job.frames);
        let at = Instant::now();
        if done.send((job, result, at, Space::of(run_dir))).is_err() {
            return;
        }
        let _ = waker.wake();
    }
}
