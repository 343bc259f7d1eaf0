//! Carrying out the BU core's outputs in order: messages to the EVM, files handed to the writers,
//! and the bookkeeping thread's actions (publishing, end-of-lumi and end-of-run records).

use super::*;

impl BuLoop {
    /// Carries out the core's outputs, until one goes to the bookkeeping thread.
    pub(super) fn dispatch(&mut self) -> Result<(), NodeError> {
        loop {
            if self.at_books.is_some() {
                return Ok(());
            }
            // An output that found the disk full is carried out again first, in its turn: the
            // core's outputs keep their order (a file's publication before its lumi section's end).
            let out = match self.deferred.take() {
                Some((out, at)) if Instant::now() < at => {
                    self.deferred = Some((out, at));
                    return Ok(());
                }
                Some((out, _)) => out,
                None => match self.core.poll_output() {
                    Some(out) => out,
                    None => return Ok(()),
                },
            };
            if let BuOutput::WriteFile { lumi_section, .. } = &out
                && u64::from(*lumi_section) > self.stats.lumi_section.get()
            {
                self.stats.lumi_section.set(u64::from(*lumi_section));
            }
            match out {
                BuOutput::Send { to: Peer::Evm, msg } => {
                    let mut frame = Vec::new();
                    encode(&msg, &mut frame)?;
                    self.stats.control_messages.add(1);
                    if let Some(c) = self.evm_conn.and_then(|t| self.io.conns.get_mut(&t)) {
                        c.queue(frame);
                    }
                }
                BuOutput::WriteFile { file, events, .. } if self.books.is_none() => {
                    let fragments = || events.iter().flat_map(|e| &e.parts).flat_map(|p| &p.fragments);
                    let bytes = fragments().map(|f| u64::from(f.bytes)).sum();
                    self.discarded.insert(file, (events.len() as u64, bytes));
                    self.store.written(fragments());
                    let now = self.now();
                    self.core.handle(now, Input::FileWritten(file));
                    self.core.recycle(events);
                }
                BuOutput::WriteFile { file, events, .. } => {
                    let frames = self.store.share(&events);
                    let (bytes, largest) = file_bytes(&events);
                    if let Some(room) = &mut self.room {
                        room.saw(largest);
                    }
                    // Waits here while the writers are busy or the disk has no room for it: the
                    // frames stay held, the store fills, and the loop stops reading data. The BU
                    // goes no faster than its disk, and the loop never blocks on its writers
                    // (which wait for it).
                    self.backlog.push_back(Job { file, events, frames, bytes });
                    self.writing += 1;
                    self.hand_to_writers()?;
                }
                BuOutput::PublishFile(file) => match &self.books {
                    Some(books) => return self.gave_books(books.give(BookAction::Publish(file)), out),
                    None => {
                        let (events, bytes) = self.discarded.remove(&file).unwrap_or_default();
                        self.published_file(file, events, bytes, true);
                    }
                },
                BuOutput::DiscardFile(file) => {
                    if let Some(room) = &mut self.room {
                        room.gone(file);
                    }
                    match &self.books {
                        Some(books) => return self.gave_books(books.give(BookAction::Discard(file)), out),
                        None => {
                            self.discarded.remove(&file);
                        }
                    }
                }
                BuOutput::EndOfLumi { lumi_section, events, lost } => match &self.books {
                    Some(books) => {
                        let action = BookAction::EndOfLumi { lumi_section, events, lost };
                        return self.gave_books(books.give(action), out);
                    }
                    None => self.lumi_ended(lumi_section, events),
                },
                BuOutput::EndOfRun { last_lumi_section, lumi_sections } => match &self.books {
                    Some(books) => {
                        let action = BookAction::EndOfRun { last_lumi_section, lumi_sections };
                        return self.gave_books(books.give(action), out);
                    }
                    None => self.ended = true,
                },
                BuOutput::Notice(n) => self.stats.problem(format!("BU {}: {n}", self.cfg.bu.bu)),
                // A BU speaks to the EVM only.
                BuOutput::Send { to, .. } => {
                    debug_assert!(false, "a BU core addressed {to:?}");
                    self.stats.problem(format!("BU {}: a message to {to} not sent", self.cfg.bu.bu))
                }
            }
        }
    }

    /// Notes that `out` went to the bookkeeping thread (`given`): the core's later outputs wait
    /// for its result ([`BuLoop::collect_books`]), so that they keep their order.
    pub(super) fn gave_books(&mut self, given: Result<(), BookkeeperGone>, out: BuOutput) -> Result<(), NodeError> {
        given.map_err(|_| NodeError::ThreadGone { bu: self.cfg.bu.bu, what: "the bookkeeping thread is" })?;
        self.at_books = Some(out);
        Ok(())
    }

    /// Takes the bookkeeping thread's result, if it is done: its effects on the BU's counts and
    /// the core, then the core's next outputs. An action that found the disk full is carried out
    /// again, in its turn, after [`DISK_FULL_RETRY`].
    pub(super) fn collect_books(&mut self) -> Result<(), NodeError> {
        let Some(books) = &self.books else { return Ok(()) };
        let done = books
            .result()
            .map_err(|_| NodeError::ThreadGone { bu: self.cfg.bu.bu, what: "the bookkeeping thread is" })?;
        let Some((action, result)) = done else { return Ok(()) };
        let out = self.at_books.take().expect("the action given");
        let published = match result {
            Ok(published) => published,
            Err(e) if e.is_disk_full() => {
                self.defer(out, &e);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        match (action, published) {
            (BookAction::Publish(file), Some(p)) => {
                // Orbit mode: the protocol counts orbits, the report events too.
                if let Some(o) = p.orbits {
                    self.orbit_events += u64::from(p.events);
                    self.orbits_written += u64::from(o.written);
                }
                self.published_file(file, u64::from(p.units()), p.bytes, p.is_in_place())
            }
            // The watcher's next look sees the room it freed.
            (BookAction::Discard(_), _) => self.update_room(),
            (BookAction::EndOfLumi { lumi_section, events, .. }, _) => self.lumi_ended(lumi_section, events),
            (BookAction::EndOfRun { .. }, _) => self.ended = true,
            (BookAction::Publish(_), None) => unreachable!("a publication gives its file"),
        }
        self.dispatch()
    }

    /// `file`, of `events` events (the protocol's units: orbits in orbit mode) and `bytes`
    /// bytes, is published (`in_place`: where readers see it, not removed as an orbit file of no
    /// orbit): counted, and the core told.
    pub(super) fn published_file(&mut self, file: FileId, events: u64, bytes: u64, in_place: bool) {
        self.published += events;
        if let Some(room) = &mut self.room {
            // Its events leave the BU's count but not the disk: the core's bound shrinks before
            // the core hears of it, or it would ask for them again.
            room.gone(file);
            self.update_room();
        }
        if in_place {
            self.files_published += 1;
            self.stats.files_published.add(1);
        }
        self.stats.bytes_published.add(bytes);
        let now = self.now();
        self.core.handle(now, Input::FilePublished(file));
    }

    /// The end-of-lumi record of `lumi_section`, of `events` events, is written (or, in discard
    /// mode, would be).
    pub(super) fn lumi_ended(&mut self, lumi_section: u32, events: u64) {
        self.stats.lumi_sections_closed.add(1);
        // Sections close in the order their files are all published, not always in number
        // order: the figure is the highest one closed.
        if u64::from(lumi_section) >= self.stats.last_closed_lumi_section.get() {
            self.stats.last_closed_lumi_section.set(u64::from(lumi_section));
            self.stats.last_closed_lumi_section_events.set(events);
        }
        tracing::debug!(
            unit = %self.cfg.name,
            run = self.cfg.run,
            lumi_section,
            events,
            "BU {}: lumi section {lumi_section} ended with {events} events",
            self.cfg.name
        );
    }

    /// Keeps `out`, which found the disk full, to carry it out again after [`DISK_FULL_RETRY`]
    /// (and every output after it in its turn); says so once until a file is written again.
    pub(super) fn defer(&mut self, out: BuOutput, e: &BuFilesError) {
        self.deferred = Some((out, Instant::now() + DISK_FULL_RETRY));
        if !std::mem::replace(&mut self.disk_full_said, true) {
            self.stats.problem(format!(
                "BU {}: RAM disk full: {e}; tried again when there is room (RAMDISK_FULL)",
                self.cfg.bu.bu
            ));
        }
    }
}
