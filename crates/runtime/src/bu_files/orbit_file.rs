//! A BU's raw file in orbit mode: each built "event" is an orbit, one orbit block per source,
//! written as CMSSW's DTH reader reads them (docs/formats.md §6): the blocks of each orbit of the
//! file one after another, no file header, no FRD record. Before an orbit is written the BU
//! checks that its sources agree, as that reader requires: the same run, orbit number and event
//! count in every orbit header, the same event ids in the same order in every block, no fragment
//! trailer flagging an error. The trigger source's block (source 1024) is the orbit's reference,
//! wherever it stands among the blocks (the first that can be walked when it cannot be). A block
//! CMSSW's reader would refuse (one that cannot be walked, whose CRC-32C is wrong, whose orbit
//! header names another source, or that disagrees with the reference) is left out of the orbit,
//! said, and the orbit counted incomplete, as an event built without a FED is; the orbit is
//! written with the others. An orbit with no event is counted, never written.

use super::{BuFilesError, FragmentBytes, LeftOut, Written};
use tessera_evb::types::FileId;
use tessera_evb::unit::BuiltEvent;
use tessera_formats::frd::flags;
use tessera_formats::orbit::{BlockKey, OrbitBlock, agree};
use tessera_formats::tcds::TCDS_FED_ID;
use tessera_rundir::{OrbitCounts, RunDirectory};

/// Writes `events`, each an orbit, as orbit file `file`; returns what was left out. With
/// `check_crc`, every block's CRC-32C is checked here (some RU does not check them all); a block
/// its RU flagged is checked in any case, to say why it is left out.
pub(super) fn write(
    dir: &RunDirectory,
    file: FileId,
    events: &[BuiltEvent],
    bytes: &impl FragmentBytes,
    check_crc: bool,
) -> Result<Written, BuFilesError> {
    let mut blocks: Vec<&[u8]> = Vec::new();
    let mut written_report = Written::default();
    let (mut event_count, mut written) = (0u32, 0u32);
    for orbit in events {
        let mut pieces = Vec::new();
        for fragment in orbit.parts.iter().flat_map(|p| &p.fragments) {
            let b =
                bytes.bytes(fragment).ok_or(BuFilesError::MissingBytes { event: orbit.event, fed: fragment.fed })?;
            crate::copies::written_by_bu(b);
            pieces.push(Piece { source: fragment.fed, bytes: b, check_crc: check_crc || fragment.corrupt });
        }
        let checked = check_orbit(&pieces);
        // An orbit built whole that loses a block here is incomplete, as an event built without
        // a FED is; one already incomplete is counted once.
        if !checked.left_out.is_empty() && orbit.flags & flags::INCOMPLETE == 0 {
            written_report.orbits_made_incomplete += 1;
        }
        let number = checked.orbit.unwrap_or_default();
        written_report.left_out.extend(checked.left_out.into_iter().map(|r| LeftOut {
            orbit: number,
            index: orbit.event,
            source: r.source,
            reason: r.reason,
            why: r.why,
        }));
        if checked.written {
            event_count += u32::from(checked.events);
            written += 1;
            blocks.extend(checked.blocks);
        }
    }
    let counts = OrbitCounts { orbits: events.len() as u32, written };
    dir.write_orbit_file(file.lumi_section, file.index, &blocks, event_count, counts)?;
    Ok(written_report)
}

/// One source's block of an orbit, as the BU holds it.
struct Piece<'a> {
    /// The source its stream is configured for.
    source: u16,
    bytes: &'a [u8],
    /// Whether its CRC-32C is to be checked here.
    check_crc: bool,
}

/// One orbit, checked.
struct CheckedOrbit<'a> {
    /// The orbit number, if any block could be read.
    orbit: Option<u32>,
    /// Its events, as its reference block says.
    events: u16,
    /// Whether it goes into the file (it has events).
    written: bool,
    /// The blocks to write, in order.
    blocks: Vec<&'a [u8]>,
    /// The blocks left out, and why.
    left_out: Vec<Refused>,
}

/// A block of an orbit refused: its source and why, as a key ([`LeftOut::reason`]) and in words.
struct Refused {
    source: u16,
    reason: &'static str,
    why: String,
}

/// Checks the blocks of one orbit against its reference, the trigger source's ([`agree`]).
fn check_orbit<'a>(pieces: &[Piece<'a>]) -> CheckedOrbit<'a> {
    let walked: Vec<Walked<'a>> = pieces.iter().map(walk).collect();
    let keys: Vec<Option<BlockKey<'_>>> = walked
        .iter()
        .map(|w| {
            let (block, ids) = w.as_ref().ok()?;
            let h = &block.header;
            Some(BlockKey { run: h.run, orbit: h.orbit, event_count: h.event_count, event_ids: ids })
        })
        .collect();
    let verdict = agree(&keys, pieces.iter().position(|p| p.source == TCDS_FED_ID));
    let unreadable = walked.iter().zip(pieces).filter_map(|(w, p)| {
        let (reason, why) = w.as_ref().err()?.clone();
        Some(Refused { source: p.source, reason, why })
    });
    let disagreeing = verdict.left_out.iter().map(|&(i, d)| Refused {
        source: pieces[i].source,
        reason: match d.field {
            "run" => "run",
            "orbit" => "orbit",
            "event count" => "event_count",
            _ => "event_id",
        },
        why: d.to_string(),
    });
    let blocks = verdict.kept.iter().filter_map(|&i| Some(walked[i].as_ref().ok()?.0.as_bytes())).collect();
    CheckedOrbit {
        orbit: verdict.orbit,
        events: verdict.events,
        written: verdict.is_written(),
        blocks,
        left_out: unreadable.chain(disagreeing).collect(),
    }
}

/// A block walked: the block and its event ids, or why it is refused (reason key, words).
type Walked<'a> = Result<(OrbitBlock<'a>, Vec<u64>), (&'static str, String)>;

/// The block of `piece` and its event ids in walking order (last first), or why CMSSW's reader
/// would refuse it: as a reason key ([`LeftOut::reason`]) and in words. Its orbit header must
/// name the source its stream is configured for; its CRC-32C is checked when asked.
fn walk<'a>(piece: &Piece<'a>) -> Walked<'a> {
    let block = OrbitBlock::parse(piece.bytes).map_err(|e| ("unreadable", e.to_string()))?;
    if block.header.source_id != u32::from(piece.source) {
        return Err((
            "source_id",
            format!(
                "its orbit header names source {}, its stream is source {}'s",
                block.header.source_id, piece.source
            ),
        ));
    }
    if piece.check_crc {
        block.check_crc().map_err(|e| ("crc32c", e.to_string()))?;
    }
    let mut ids = Vec::with_capacity(block.header.event_count.into());
    for fragment in block.fragments() {
        let fragment = fragment.map_err(|e| ("unreadable", e.to_string()))?;
        if fragment.flags() != 0 {
            return Err((
                "trailer_flags",
                format!(
                    "event {}: its fragment trailer flags an error ({:#06x})",
                    fragment.event_id(),
                    fragment.flags()
                ),
            ));
        }
        ids.push(fragment.event_id());
    }
    Ok((block, ids))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_formats::orbit::{FragmentInfo, OrbitBlockWriter, orbit_fragment_len};

    fn block(source: u32, orbit: u32, ids: &[u64], flags: u16) -> Vec<u8> {
        let mut out = vec![0; 32 + ids.len() * orbit_fragment_len(32)];
        let mut w = OrbitBlockWriter::new(&mut out, source, 5, orbit).unwrap();
        for &id in ids {
            let info = FragmentInfo {
                event_id: id,
                bx: 1,
                l1a_types: 1,
                physics_type: 1,
                emulation_status: 0,
                status: 0,
                flags,
            };
            w.push_fragment(&info, &[7; 32]).unwrap();
        }
        w.finish().unwrap();
        out
    }

    fn piece(source: u16, bytes: &[u8]) -> Piece<'_> {
        Piece { source, bytes, check_crc: true }
    }

    #[test]
    fn blocks_that_disagree_with_the_trigger_block_are_left_out_and_said_the_others_kept_in_order() {
        let reference = block(1024, 9, &[10, 11, 12], 0);
        let good = block(3, 9, &[10, 11, 12], 0);
        let short = block(4, 9, &[10, 11], 0);
        let shifted = block(5, 9, &[10, 11, 13], 0);
        let other_orbit = block(6, 8, &[10, 11, 12], 0);
        let flagged = block(7, 9, &[10, 11, 12], 1);
        let mut bad_crc = block(9, 9, &[10, 11, 12], 0);
        bad_crc[28] ^= 1;
        let other_source = block(10 ^ 0x800, 9, &[10, 11, 12], 0);
        // The short block came first: the trigger source's block is the reference all the same.
        let pieces = vec![
            piece(4, &short),
            piece(1024, &reference),
            piece(3, &good),
            piece(5, &shifted),
            piece(6, &other_orbit),
            piece(7, &flagged),
            piece(8, &[0x48; 40]),
            piece(9, &bad_crc),
            piece(10, &other_source),
        ];
        let c = check_orbit(&pieces);
        assert_eq!((c.orbit, c.events), (Some(9), 3));
        assert_eq!(c.blocks, vec![&reference[..], &good[..]]);
        let out: Vec<(u16, &str, &str)> = c.left_out.iter().map(|l| (l.source, l.reason, l.why.as_str())).collect();
        let keys: Vec<(u16, &str)> = out.iter().map(|o| (o.0, o.1)).collect();
        assert_eq!(
            keys,
            vec![
                (7, "trailer_flags"),
                (8, "unreadable"),
                (9, "crc32c"),
                (10, "source_id"),
                (4, "event_count"),
                (5, "event_id"),
                (6, "orbit")
            ]
        );
        assert!(out[0].2.contains("flags an error"), "{}", out[0].2);
        assert!(out[2].2.contains("CRC-32C"), "{}", out[2].2);
        assert_eq!(out[3].2, "its orbit header names source 2058, its stream is source 10's");
        assert_eq!(out[4].2, "event count 2, where the orbit's reference block has 3");
        assert_eq!(out[5].2, "event id 13, where the orbit's reference block has 12");
        assert_eq!(out[6].2, "orbit 8, where the orbit's reference block has 9");
        // Unchecked, a bad CRC-32C goes unseen: the BU checks it when its RU does not.
        let unchecked = Piece { check_crc: false, ..piece(9, &bad_crc) };
        assert!(check_orbit(&[piece(1024, &reference), unchecked]).left_out.is_empty());
    }

    #[test]
    fn an_empty_orbit_has_no_events_and_nothing_unreadable_makes_no_orbit() {
        let empty = block(1024, 9, &[], 0);
        let other = block(3, 9, &[], 0);
        let c = check_orbit(&[piece(1024, &empty), piece(3, &other)]);
        assert_eq!((c.events, c.blocks.len(), c.left_out.len()), (0, 2, 0));
        let c = check_orbit(&[piece(1024, &[1u8; 16])]);
        assert_eq!((c.orbit, c.blocks.len(), c.left_out.len()), (None, 0, 1));
    }
}
