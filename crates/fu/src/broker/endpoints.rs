//! The broker's endpoints: each takes a parsed request and gives the answer (docs/formats.md §16).

use super::http::{Answer, Body, Query};
use super::popfile::{NoFile, Pop, decide, last_eols, nothing_now};
use super::{CLAIM_ATTEMPTS, Shared};
use crate::claim::{Claimer, FileSource};
use std::fs::{self, File};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tessera_formats::names::{self, ClaimedRawName};
use tessera_rundir::resources::{ResourceSummary, now_unix_ms, summary_path, write_summary};

/// An error answer's status and message.
pub(super) type Refusal = (u16, String);

/// The longest host name a reader may claim under (a DNS label's limit, and what keeps every
/// answer within [`crate::reader::MAX_ANSWER_BYTES`]).
const MAX_HOST_BYTES: usize = 63;

/// `GET /popfile`: see [`super::popfile`] for which answer, and docs/formats.md §16 for the
/// document. Every answer carries `version`, `runnumber` (the run asked for), `state` and
/// `lasteols`.
pub(super) fn popfile(raw_query: &str, peer: SocketAddr, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "pid", "host", "stopls", "anyls"])?;
    let run = query.number("runnumber")?;
    let pid = query.number("pid")?;
    let stop_ls = query.optional_number("stopls")?;
    let any_ls = query.optional_number("anyls")?.is_some_and(|n| n != 0);
    let host = remote_host(&query, peer, shared)?;
    let current = shared.run.load(Ordering::Relaxed);
    if run != current {
        let served = format!("this broker serves run {current}");
        return Ok(pop_answer(run, "NORUN", 0, &[("servedrun", current.to_string()), ("errormessage", served)]));
    }
    let run_dir = shared.run_dir(run);
    if !run_dir.is_dir() {
        return Ok(pop_answer(run, "STARTING", 0, &[]));
    }
    let internal = |e: crate::FuError| (500, e.to_string());
    let claimer = Claimer::new(&shared.bu_dir, run, &host, pid).map_err(internal)?;
    let reader_ls = shared.grants().seen(&host, pid, Instant::now());
    let mut said_eols = 0;
    for attempt in 0..CLAIM_ATTEMPTS {
        let (said, pop) = shared
            .on_listing(&claimer, run, attempt > 0, |state| {
                (last_eols(state), decide(state, reader_ls, stop_ls, any_ls))
            })
            .map_err(internal)?;
        said_eols = said;
        let candidates = match pop {
            Pop::Claim(candidates) => candidates,
            Pop::NoFile(no_file) => return Ok(answer_no_file(shared, run, &host, pid, no_file, said_eols)),
        };
        if let Some(claim) = claimer.claim_first(&candidates).map_err(internal)? {
            let name = claim.name.clone();
            shared.claimed(run, name.ls, name.index);
            let mut grants = shared.grants();
            grants.granted(&run_dir, name.clone());
            grants.moved(&host, pid, name.ls);
            drop(grants);
            let stem = name.to_string().strip_suffix(".raw").unwrap_or_default().to_owned();
            let mut answer = pop_answer(
                run,
                "READY",
                said_eols,
                &[
                    ("file", stem),
                    ("fileprefix", format!("{}/", names::FU_DIR)),
                    ("lumisection", name.ls.to_string()),
                    ("index", name.index.to_string()),
                ],
            );
            answer.give_back = Some((claim.path, run_dir.join(name.raw().to_string())));
            return Ok(answer);
        }
        // Other processes took every candidate since the listing: read the directory again.
    }
    Ok(answer_no_file(shared, run, &host, pid, nothing_now(reader_ls, said_eols, any_ls), said_eols))
}

/// The answer without a file, saying `lasteols = said_eols`, after which the reader stands where it says.
fn answer_no_file(shared: &Shared, run: u32, host: &str, pid: u32, no_file: NoFile, said_eols: u32) -> Answer {
    shared.grants().moved(host, pid, no_file.moves_to(said_eols));
    match no_file {
        NoFile::EndOfLumi => pop_answer(run, "EOLS", said_eols, &[]),
        NoFile::Wait { ls } => pop_answer(run, "READY", said_eols, &[("lumisection", ls.to_string())]),
        NoFile::EndOfRun { ls } => pop_answer(run, "EOR", said_eols, &[("lumisection", ls.to_string())]),
    }
}

/// A `/popfile` document: `state`, then `fields`, then `lasteols`.
fn pop_answer(run: u32, state: &str, last_eols: u32, fields: &[(&str, String)]) -> Answer {
    let mut all = vec![("state", state.to_owned())];
    all.extend(fields.iter().cloned());
    all.push(("lasteols", last_eols.to_string()));
    Answer::document(200, run, &all)
}

/// The name a remote FU claims under: `host` if given (checked), else its address.
pub(super) fn remote_host(query: &Query, peer: SocketAddr, shared: &Shared) -> Result<String, Refusal> {
    let host = match query.get("host") {
        Some(host) => host.to_owned(),
        None => peer_host_name(peer.ip()),
    };
    names::validate_producer_name(&host).map_err(|e| (400, format!("host: {e}")))?;
    // A longer name would make a READY answer overflow what a CMSSW reader reads at once.
    if host.len() > MAX_HOST_BYTES {
        return Err((400, format!("host: {} characters, more than {MAX_HOST_BYTES}", host.len())));
    }
    if host == shared.local_host {
        return Err((400, format!("host {host:?} is the BU's own host name, which its local FUs claim under")));
    }
    Ok(host)
}

/// `GET /state`: what the run directory says, for a remote FU or micro merger.
pub(super) fn run_state(raw_query: &str, peer: SocketAddr, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "host"])?;
    let run = query.number("runnumber")?;
    let host = remote_host(&query, peer, shared)?;
    let current = shared.run.load(Ordering::Relaxed);
    if run != current {
        return Ok(Answer::state(current, "NORUN"));
    }
    if !shared.run_dir(run).is_dir() {
        return Ok(Answer::document(200, run, &[("state", "STARTING".to_owned()), ("host", host)]));
    }
    let internal = |e: crate::FuError| (500, e.to_string());
    let state = Claimer::new(&shared.bu_dir, run, &host, 0).map_err(internal)?.listing().map_err(internal)?;
    let join = |v: Vec<String>| v.join(",");
    let fields = [
        ("state", if state.ended { "ENDED" } else { "RUNNING" }.to_owned()),
        ("host", host.clone()),
        ("endedls", join(state.ended_lumi_sections.iter().map(u32::to_string).collect())),
        ("filels", join(state.lumi_sections_with_files.iter().map(u32::to_string).collect())),
        ("unclaimed", join(state.unclaimed.iter().map(|(ls, i)| format!("{ls}:{i}")).collect())),
        ("claimed", join(state.claimed.iter().filter(|c| c.host == host).map(ToString::to_string).collect())),
    ];
    Ok(Answer::document(200, run, &fields))
}

/// The claim named by `runnumber` and `name`, for the run served.
pub(super) fn claimed_name(query: &Query, shared: &Shared) -> Result<(u32, ClaimedRawName), Refusal> {
    let run = query.number("runnumber")?;
    let name = query.required("name")?;
    let claim = ClaimedRawName::parse(name).map_err(|e| (400, format!("name: {e}")))?;
    if name != claim.to_string() && name != claim.path() {
        return Err((400, format!("name {name:?} is not spelt as the broker writes it")));
    }
    if claim.run != run {
        return Err((400, format!("name {name:?} is not a file of run {run}")));
    }
    Ok((served(run, shared)?, claim))
}

/// Whether `path` is a regular file (not a link to one).
pub(super) fn is_plain_file(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// `GET /file` and `GET /index`.
pub(super) fn serve_claimed(raw_query: &str, shared: &Shared, index: bool) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "name"])?;
    let (run, claim) = claimed_name(&query, shared)?;
    let run_dir = shared.run_dir(run);
    let claimed = run_dir.join(claim.path());
    if !is_plain_file(&claimed) {
        return Err((404, format!("{} is not claimed", claim.path())));
    }
    let path =
        if index { run_dir.join(claim.raw().index_json().map(|j| j.to_string()).unwrap_or_default()) } else { claimed };
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err((404, format!("{} is gone", path.display()))),
        Err(e) => return Err((500, format!("opening {}: {e}", path.display()))),
    };
    let len = file.metadata().map_err(|e| (500, format!("reading the size of {}: {e}", path.display())))?.len();
    let content_type = if index { "application/json" } else { "application/octet-stream" };
    Ok(Answer { status: 200, content_type, body: Body::File { file, len }, allow: None, give_back: None })
}

/// `POST /done`.
pub(super) fn done(raw_query: &str, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "name"])?;
    let (run, claim) = claimed_name(&query, shared)?;
    if !is_plain_file(&shared.run_dir(run).join(claim.path())) {
        return Err((404, format!("{} is not claimed", claim.path())));
    }
    let claimer = Claimer::new(&shared.bu_dir, run, &claim.host, claim.pid).map_err(|e| (500, e.to_string()))?;
    // The grants stay locked from the removal to the grant's end: a sweep in between would find
    // the file gone and count it as a CMSSW reader's deletion (and write the reader ledger).
    let mut grants = shared.grants();
    claimer.remove_processed(&claim).map_err(|e| (500, e.to_string()))?;
    grants.ended(&claim, true);
    Ok(Answer::document(200, run, &[("file", claim.path()), ("result", "removed".to_owned())]))
}

/// `POST /release`.
pub(super) fn release(raw_query: &str, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "name"])?;
    let (run, claim) = claimed_name(&query, shared)?;
    let run_dir = shared.run_dir(run);
    let from = run_dir.join(claim.path());
    let to = run_dir.join(claim.raw().to_string());
    if !is_plain_file(&from) {
        return Err((404, format!("{} is not claimed", claim.path())));
    }
    if fs::symlink_metadata(&to).is_ok() {
        return Err((409, format!("{} exists already", claim.raw())));
    }
    match fs::rename(&from, &to) {
        Ok(()) => {
            shared.released(run, claim.ls, claim.index);
            shared.grants().ended(&claim, false);
            Ok(Answer::document(200, run, &[("file", claim.path()), ("result", "released".to_owned())]))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err((404, format!("{} is not claimed", claim.path()))),
        Err(e) => Err((500, format!("giving back {}: {e}", from.display()))),
    }
}

/// `POST /summary`: a remote FU's resource summary (JSON, [`ResourceSummary`]), written where
/// a local FU's goes. Its `run` must be the run served and its `host` the name the FU claims
/// under; `updated_unix_ms` is replaced by the time of receipt, so that the BU judges the
/// summary's age by its own clock, not by the FU host's.
pub(super) fn publish_summary(
    raw_query: &str,
    body: &[u8],
    peer: SocketAddr,
    shared: &Shared,
) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "host"])?;
    let run = served(query.number("runnumber")?, shared)?;
    let host = remote_host(&query, peer, shared)?;
    let mut summary: ResourceSummary =
        serde_json::from_slice(body).map_err(|e| (400, format!("the body is not a resource summary: {e}")))?;
    if summary.run != run {
        return Err((400, format!("a summary of run {} posted for run {run}", summary.run)));
    }
    if summary.host != host {
        return Err((
            400,
            format!("a summary of host {:?} from a client whose claims are made under {host:?}", summary.host),
        ));
    }
    if !(summary.output_bytes_per_s >= 0.0 && summary.cpu_seconds >= 0.0) {
        return Err((400, "output_bytes_per_s and cpu_seconds must not be negative".into()));
    }
    summary.updated_unix_ms = now_unix_ms();
    // A summary is a sign of life: the FU's lease starts again.
    shared.grants().seen(&host, summary.pid, Instant::now());
    write_summary(&shared.bu_dir, &summary).map_err(|e| (500, e.to_string()))?;
    Ok(Answer::document(200, run, &[("pid", summary.pid.to_string()), ("result", "published".to_owned())]))
}

/// `DELETE /summary`: a remote FU is leaving; its summary is removed, if there.
pub(super) fn remove_summary(raw_query: &str, peer: SocketAddr, shared: &Shared) -> Result<Answer, Refusal> {
    let query = Query::parse(raw_query, &["runnumber", "pid", "host"])?;
    let run = served(query.number("runnumber")?, shared)?;
    let pid = query.number("pid")?;
    let host = remote_host(&query, peer, shared)?;
    let path = summary_path(&shared.bu_dir, &host, pid);
    let result = match fs::remove_file(&path) {
        Ok(()) => "removed",
        Err(e) if e.kind() == io::ErrorKind::NotFound => "absent",
        Err(e) => return Err((500, format!("removing {}: {e}", path.display()))),
    };
    Ok(Answer::document(200, run, &[("pid", pid.to_string()), ("result", result.to_owned())]))
}

/// `run` if it is the run served; 404 otherwise.
pub(super) fn served(run: u32, shared: &Shared) -> Result<u32, Refusal> {
    let current = shared.run.load(Ordering::Relaxed);
    if run != current {
        return Err((404, format!("run {run} is not served (the broker serves run {current})")));
    }
    Ok(run)
}

/// The host name a remote FU claims under when it gives none: its IP address with `.` and `:`
/// replaced by `-` (`10.0.0.2` becomes `10-0-0-2`; an IPv4 address mapped into IPv6 is written
/// as IPv4).
pub fn peer_host_name(ip: IpAddr) -> String {
    ip.to_canonical().to_string().replace(['.', ':'], "-")
}
