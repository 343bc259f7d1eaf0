//! The BU's connections: reading the RUs' data and the EVM's messages into the core (each
//! frame kept where it was read), losing or refusing a peer, and flushing its requests. The
//! event loop (`crate::event_loop`) accepts them and says which are readable.

use super::*;

impl BuLoop {
    /// Whether the store has room for another frame: always under pull, whose store has no
    /// budget of its own (what comes was asked for within the core's room).
    pub(super) fn store_has_room(&self) -> bool {
        self.store.has_room_for(self.cfg.max_frame_bytes as usize)
    }

    /// Reads the connection `token` into the store and the core; true if it has more.
    pub(super) fn read_conn(&mut self, token: Token) -> Result<bool, NodeError> {
        let mut refused = None;
        let store = &mut self.store;
        // Straight into the connection's queue, which stays while the connection does: no list
        // per read.
        let queue = self.unread.entry(token).or_default();
        let before = queue.len();
        // Into the lists of the events the writers are done with.
        let lists = self.core.fragment_lists();
        let Some(pass) = self.io.read_with(token, lists, |peer, decoded, frame| match store.insert(decoded, frame) {
            Ok(msg) => queue.push_back((peer, msg)),
            Err(e) => refused = Some(e),
        }) else {
            // Closed: the queue goes unless it holds the EVM's messages, taken after its close.
            if self.unread.get(&token).is_some_and(VecDeque::is_empty) {
                self.unread.remove(&token);
            }
            return Ok(false);
        };
        if let Some(peer) = pass.linked
            && (!matches!(peer, Peer::Ru(r) if r > 0 && r < self.cfg.bu.n_ru) || !self.io.admits(token))
        {
            self.unread.remove(&token);
            self.io.refuse(token, &format!("BU {}", self.cfg.bu.bu), peer);
            return Ok(pass.more);
        }
        if let Some(e) = refused {
            return Err(NodeError::StoreFull { bu: self.cfg.bu.bu, source: e });
        }
        let read = self.unread.get(&token).into_iter().flat_map(|q| q.range(before..)).map(|(_, m)| m);
        self.stats.data_messages.add(read.clone().filter(|m| !m.is_control()).count() as u64);
        if let Some(room) = self.room.as_mut().filter(|r| r.counts_parts()) {
            for msg in read {
                if let tessera_evb::msg::Message::Data { ru, parts, .. } = msg {
                    room.saw_parts(*ru, parts);
                }
            }
        }
        self.feed_unread();
        if let Some(why) = pass.closed {
            self.close_conn(token, why.map(|w| w.to_string()))?;
        }
        Ok(pass.more)
    }

    /// Hands the core the messages read, each connection's in order, as long as it takes them:
    /// under push a data message that would begin new events waits while the core has no room
    /// for them (one read's worth at most per connection: the loop reads no more of it until
    /// they are all taken).
    pub(super) fn feed_unread(&mut self) {
        let now = self.now();
        for queue in self.unread.values_mut() {
            while let Some((from, msg)) = queue.pop_front() {
                if !self.core.takes(&msg) {
                    queue.push_front((from, msg));
                    break;
                }
                self.core.handle(now, Input::Message { from, msg });
            }
        }
    }

    /// A connection ended: losing the EVM before the end of run fails the BU; a caller that
    /// never proved itself a unit of this run is counted as refused.
    pub(super) fn close_conn(&mut self, token: Token, why: Option<String>) -> Result<(), NodeError> {
        let Some(c) = self.io.close(token) else { return Ok(()) };
        // Its messages not yet taken go with it, but for the EVM's, taken as room comes.
        if Some(token) != self.evm_conn {
            self.unread.remove(&token);
        }
        // The EVM's last messages (its end of run) may have come with its close.
        self.dispatch()?;
        if Some(token) == self.evm_conn {
            // Its end of run came: the record may still be on its way to the disk (the loop
            // waits for it).
            if self.ended || self.core.run_ended() {
                return Ok(());
            }
            return Err(NodeError::EvmLostBeforeEnd { bu: self.cfg.bu.bu, why, pending: self.core.pending() });
        }
        match why {
            Some(w) if c.peer.is_none() => {
                self.stats.links_refused.add(1);
                self.stats.problem(format!("BU {}: refused a connection: {w}", self.cfg.bu.bu));
            }
            Some(w) => self.stats.problem(format!("BU {}: {w}", self.cfg.bu.bu)),
            None => {}
        }
        Ok(())
    }

    /// Flushes the connections; one that broke is closed and said.
    pub(super) fn flush_conns(&mut self) {
        for (token, line) in self.io.flush(&NoPieces, |_, _, _| {}) {
            if self.io.close(token).is_some() {
                self.stats.problem(format!("BU {}: {line}", self.cfg.bu.bu));
            }
        }
    }

    /// Whether the EVM's connection is still open.
    pub(super) fn evm_connected(&self) -> bool {
        self.evm_conn.is_some_and(|t| self.io.conns.contains_key(&t))
    }
}
