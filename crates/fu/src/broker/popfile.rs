//! Which answer a `GET /popfile` gets (docs/formats.md §16), as a pure function of the run
//! directory's listing, where the asking reader stands and its `stopls`: no sockets, no files.
//!
//! The rules are those an unchanged CMSSW reader relies on. A reader's lumi section only moves
//! forward: every answer moves it (a `READY` file's `lumisection`, an `EOLS`'s `lasteols` + 1, a
//! `READY` without a file's `lumisection`), and a file of an older lumi section than the one it
//! has open is fatal to it. So a reader is only ever handed the lowest unclaimed file at or above
//! its lumi section, and a reader that asks with `stopls = L` gets no file of a later section and
//! `EOR` once every file up to `L` is handed out and `L` is closed.
//!
//! Every answer says how far lumi sections are closed (`lasteols`), and a CMSSW reader writes its
//! end-of-lumi markers from it, for every section from the one it has open up to `lasteols`,
//! *before* it opens the file the answer grants. So `lasteols` is not simply the BU's last EoLS:
//! it stays below every file not yet handed out ([`last_eols`]), and a section is said closed only
//! once all of its files are handed out.

use crate::claim::BuRunState;

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Pop {
    /// Claim one of these files, `(ls, index)`, in this order, all of the same lumi section,
    /// and answer `READY` with the one claimed (the caller claims the first that no other
    /// process takes first).
    Claim(Vec<(u32, u32)>),
    /// Answer without a file.
    NoFile(NoFile),
}

/// An answer without a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoFile {
    /// `EOLS`: nothing for the reader now; it moves to `lasteols + 1`.
    EndOfLumi,
    /// `READY` without a file, `lumisection = ls`: nothing now, and the reader is ahead of what
    /// the BU has closed (it took a file of a section that was still open), so it stays at `ls`
    /// rather than being told of a section behind it.
    Wait {
        /// The reader's lumi section.
        ls: u32,
    },
    /// `EOR`, `lumisection = ls`: nothing is left for the reader (the run has ended, or its
    /// `stopls` is reached); `ls` is where it already stands or the last section closed, so that
    /// it opens no empty section before it stops.
    EndOfRun {
        /// The lumi section to end in.
        ls: u32,
    },
}

impl NoFile {
    /// The lumi section the answer moves the reader to, when it says `lasteols = last_eols`.
    pub(super) fn moves_to(self, last_eols: u32) -> u32 {
        match self {
            NoFile::EndOfLumi => last_eols + 1,
            NoFile::Wait { ls } | NoFile::EndOfRun { ls } => ls,
        }
    }
}

/// The highest lumi section up to which the BU has closed every section (`lasteols`): its EoLS
/// records from 1 on without a gap, or the highest of them once the run has ended.
pub(super) fn last_closed(state: &BuRunState) -> u32 {
    if state.ended {
        return state.ended_lumi_sections.last().copied().unwrap_or(0);
    }
    let mut closed = 0;
    for &ls in &state.ended_lumi_sections {
        if ls != closed + 1 {
            break;
        }
        closed = ls;
    }
    closed
}

/// The `lasteols` every answer says: the last section the BU has closed ([`last_closed`]), but
/// below the lowest section that still has a file to hand out, the one this answer may grant
/// included. A CMSSW reader told `lasteols = N` marks sections up to N ended before it reads the
/// file it was given, so no file of a section at or below it may be handed out after.
pub(super) fn last_eols(state: &BuRunState) -> u32 {
    let closed = last_closed(state);
    match state.unclaimed.iter().map(|&(ls, _)| ls).min() {
        Some(lowest) => closed.min(lowest.saturating_sub(1)),
        None => closed,
    }
}

/// The answer to a reader standing at lumi section `reader_ls` (0 before its first answer),
/// asking with `stop_ls`. A reader that takes files of any lumi section in any order (a Tessera
/// FU, `any_ls`) is handed the lowest unclaimed file whatever it had before.
pub(super) fn decide(state: &BuRunState, reader_ls: u32, stop_ls: Option<u32>, any_ls: bool) -> Pop {
    let from = if any_ls { 0 } else { reader_ls };
    let wanted = |ls: u32| ls >= from && stop_ls.is_none_or(|stop| ls <= stop);
    if let Some(&(first_ls, _)) = state.unclaimed.iter().find(|&&(ls, _)| wanted(ls)) {
        return Pop::Claim(state.unclaimed.iter().copied().filter(|&(ls, _)| ls == first_ls).collect());
    }
    let closed = last_closed(state);
    // Nothing this reader may take is left: once the run has ended (or its `stopls` section
    // is closed) there is nothing more for it. A file of an older section that comes back to
    // the pool is for a new reader.
    if state.ended || stop_ls.is_some_and(|stop| closed >= stop) {
        let end = stop_ls.map_or(closed, |stop| stop.min(closed));
        return Pop::NoFile(NoFile::EndOfRun { ls: end.max(reader_ls) });
    }
    Pop::NoFile(nothing_now(reader_ls, last_eols(state), any_ls))
}

/// The answer when there is no file for the reader now but more may come, `last_eols` being
/// what the answer says ([`last_eols`]): `EOLS`, unless that would tell it of a section behind
/// the one it has open (it took a file of a section not closed yet): then it waits where it is.
pub(super) fn nothing_now(reader_ls: u32, last_eols: u32, any_ls: bool) -> NoFile {
    if !any_ls && last_eols + 1 < reader_ls { NoFile::Wait { ls: reader_ls } } else { NoFile::EndOfLumi }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(unclaimed: &[(u32, u32)], ended_ls: &[u32], ended: bool) -> BuRunState {
        BuRunState {
            unclaimed: unclaimed.to_vec(),
            ended_lumi_sections: ended_ls.iter().copied().collect(),
            ended,
            ..BuRunState::default()
        }
    }

    #[test]
    fn a_reader_gets_the_lowest_section_at_or_above_its_own_never_an_older_one() {
        let s = state(&[(1, 3), (2, 0), (2, 1), (3, 0)], &[1], false);
        assert_eq!(decide(&s, 0, None, false), Pop::Claim(vec![(1, 3)]));
        assert_eq!(decide(&s, 2, None, false), Pop::Claim(vec![(2, 0), (2, 1)]));
        assert_eq!(decide(&s, 4, None, false), Pop::NoFile(NoFile::Wait { ls: 4 }));
        // A Tessera FU takes the oldest file whatever it had before.
        assert_eq!(decide(&s, 4, None, true), Pop::Claim(vec![(1, 3)]));
    }

    #[test]
    fn lasteols_counts_closed_sections_without_a_gap_until_the_run_ends() {
        assert_eq!(last_closed(&state(&[], &[1, 2, 4], false)), 2);
        assert_eq!(last_closed(&state(&[], &[2], false)), 0);
        assert_eq!(last_closed(&state(&[], &[1, 2, 4], true)), 4);
    }

    #[test]
    fn lasteols_stays_below_every_section_with_a_file_to_hand_out() {
        // Sections 1 to 3 closed, a file of 2 and one of 4 unclaimed: the answer that grants the
        // file of 2 says 1, so that the reader does not mark 2 ended before it reads it.
        let s = state(&[(2, 5), (4, 0)], &[1, 2, 3], false);
        assert_eq!(last_closed(&s), 3);
        assert_eq!(last_eols(&s), 1);
        assert_eq!(decide(&s, 0, None, false), Pop::Claim(vec![(2, 5)]));
        // Once it is handed out, 3 is closed for every reader; 4's file holds it there.
        assert_eq!(last_eols(&state(&[(4, 0)], &[1, 2, 3], false)), 3);
        assert_eq!(last_eols(&state(&[], &[1, 2, 3], false)), 3);
        // A reader beyond what may be said closed waits where it is rather than going back.
        assert_eq!(decide(&state(&[(2, 5)], &[1, 2, 3], false), 4, None, false), Pop::NoFile(NoFile::Wait { ls: 4 }));
    }

    #[test]
    fn with_nothing_to_claim_a_reader_moves_past_closed_sections_and_ends_at_the_run_s_end() {
        let open = state(&[], &[1, 2], false);
        assert_eq!(decide(&open, 1, None, false), Pop::NoFile(NoFile::EndOfLumi));
        assert_eq!(NoFile::EndOfLumi.moves_to(2), 3);
        let ended = state(&[], &[1, 2, 3], true);
        assert_eq!(decide(&ended, 3, None, false), Pop::NoFile(NoFile::EndOfRun { ls: 3 }));
        assert_eq!(decide(&ended, 5, None, false), Pop::NoFile(NoFile::EndOfRun { ls: 5 }));
        // Files left after the run's end are still handed out before EOR; one of a section behind
        // the reader is for another.
        let left = state(&[(3, 1)], &[1, 2, 3], true);
        assert_eq!(decide(&left, 3, None, false), Pop::Claim(vec![(3, 1)]));
        assert_eq!(decide(&left, 4, None, false), Pop::NoFile(NoFile::EndOfRun { ls: 4 }));
        assert_eq!(decide(&left, 0, None, false), Pop::Claim(vec![(3, 1)]));
    }

    #[test]
    fn stopls_hands_out_nothing_later_and_ends_once_its_section_is_closed_and_handed_out() {
        let s = state(&[(3, 0), (4, 0)], &[1, 2], false);
        assert_eq!(decide(&s, 3, Some(3), false), Pop::Claim(vec![(3, 0)]));
        // Section 3 handed out but not closed: wait for it.
        let s = state(&[(4, 0)], &[1, 2], false);
        assert_eq!(decide(&s, 3, Some(3), false), Pop::NoFile(NoFile::EndOfLumi));
        // Closed: EOR in section 3, though section 4 has files.
        let s = state(&[(4, 0)], &[1, 2, 3], false);
        assert_eq!(decide(&s, 3, Some(3), false), Pop::NoFile(NoFile::EndOfRun { ls: 3 }));
    }
}
