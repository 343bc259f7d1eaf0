use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use tessera_formats::FormatError;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, IndexDoc, Legend};
use tessera_formats::crc::Crc32c;
use tessera_formats::frd::{FRD_HEADER_BYTES, FRD_VERSION, FrdHeader};
use tessera_formats::names::{self, BuFileName, FuLock};
use tessera_formats::raw::{RAW_V2_HEADER_BYTES, RawFileHeader};

use crate::error::{Result, RunDirError, io_err};
use crate::summary::{FileSummary, OrbitCounts, read_orbit_summary, remove_empty, remove_summary};

/// Writes `bytes` to `path` atomically: to a temporary file `path.<pid>.<n>.tmp` first, then
/// renamed over `path`. The temporary file is created only if new (`n` counts up until one is),
/// so that writers of the same file at once never write or rename each other's: FUs starting
/// together write their output `.jsd`, and FUs in containers may all be process 1. A write that
/// fails (a full disk) removes what it wrote of the temporary file, so that it can be tried again.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (tmp, mut file) = {
        let mut tries = 0;
        loop {
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(format!(
                ".{}.{}.{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed),
                names::TEMPORARY_EXT
            ));
            let tmp = PathBuf::from(tmp);
            match fs::OpenOptions::new().write(true).create_new(true).open(&tmp) {
                Ok(file) => break (tmp, file),
                // Bounded: each try takes a name no writer of this process has taken.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < TEMPORARY_NAME_TRIES => tries += 1,
                Err(e) => return Err(io_err("creating", &tmp)(e)),
            }
        }
    };
    if let Err(e) = file.write_all(bytes) {
        drop(file);
        let _ = fs::remove_file(&tmp);
        return Err(io_err("writing", &tmp)(e));
    }
    drop(file);
    fs::rename(&tmp, path).map_err(io_err("renaming into place", path))
}

/// Temporary names [`write_atomically`] tries before it gives up.
const TEMPORARY_NAME_TRIES: u32 = 1000;

/// A run directory `<bu_dir>/runRRRRRR` being written.
#[derive(Debug)]
pub struct RunDirectory {
    path: PathBuf,
    run: u32,
    source: String,
    /// Per lumi section, the files published in the run directory so far: the next one's index
    /// in its published name. Files are numbered as they are published, so that the indices a
    /// reader sees run 0, 1, 2… whatever was never published (an orbit file of no orbit).
    published_in_place: Mutex<BTreeMap<u32, u32>>,
}

impl RunDirectory {
    /// Creates the run directory with `open/`, the `.jsd` definitions and `fu.lock`; `source`
    /// names this BU in every JSON document it writes.
    pub fn create(bu_dir: &Path, run: u32, source: &str) -> Result<Self> {
        Self::create_with(bu_dir, run, source, false)
    }

    /// Creates the run directory of a BU in orbit mode, as [`RunDirectory::create`] does, its
    /// `.jsd` definitions with the orbit counts (docs/formats.md §7); its raw files are written
    /// with [`RunDirectory::write_orbit_file`].
    pub fn create_for_orbits(bu_dir: &Path, run: u32, source: &str) -> Result<Self> {
        Self::create_with(bu_dir, run, source, true)
    }

    fn create_with(bu_dir: &Path, run: u32, source: &str, orbits: bool) -> Result<Self> {
        let path = bu_dir.join(names::run_dir_name(run));
        for dir in [path.join(names::OPEN_DIR), path.join(names::JSD_DIR)] {
            fs::create_dir_all(&dir).map_err(io_err("creating", &dir))?;
        }
        let files = [names::RAW_DATA_JSD, names::EOLS_JSD, names::EOR_JSD];
        for (file, legend) in files.into_iter().zip(Legend::run_directory(orbits)) {
            write_atomically(&path.join(file), legend.to_json().as_bytes())?;
        }
        let lock = FuLock { next_ls: 1, next_index: 0 };
        write_atomically(&path.join(names::FU_LOCK), lock.to_string().as_bytes())?;
        Ok(RunDirectory { path, run, source: source.to_owned(), published_in_place: Mutex::default() })
    }

    /// The run directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run number.
    pub fn run(&self) -> u32 {
        self.run
    }

    fn definition(&self, jsd: &str) -> String {
        self.path.join(jsd).display().to_string()
    }

    /// Starts raw file `index` of lumi section `ls` under `open/`, with its header reserved.
    pub fn open_raw_file(&self, ls: u32, index: u32, data_type: u16) -> Result<RawFileWriter> {
        let name = BuFileName::Raw { run: self.run, ls, index }.to_string();
        let open_path = self.path.join(names::OPEN_DIR).join(&name);
        let mut out = File::create(&open_path).map_err(io_err("creating", &open_path))?;
        out.write_all(&[0u8; RAW_V2_HEADER_BYTES]).map_err(io_err("writing", &open_path))?;
        Ok(RawFileWriter {
            out,
            open_path,
            run: self.run,
            ls,
            index,
            data_type,
            events: 0,
            bytes: RAW_V2_HEADER_BYTES as u64,
        })
    }

    /// Closes `file`: writes its final header and leaves it complete in `open/`, unpublished
    /// (the BU publishes it once the EVM has committed it).
    pub fn close(&self, file: RawFileWriter) -> Result<ClosedFile> {
        let RawFileWriter { out, open_path, run, ls, index, data_type, events, bytes, .. } = file;
        let header = RawFileHeader::v2(data_type, events, run, ls, bytes);
        out.write_all_at(&header.to_bytes(), 0).map_err(io_err("writing", &open_path))?;
        Ok(ClosedFile { ls, index, events, bytes })
    }

    /// Publishes the closed file `ls`/`index` from `open/`: renames it into the run directory,
    /// then writes its `.jsn`. Its counts come from its header, so a file closed by an earlier
    /// incarnation of the BU publishes the same way. `index` names it in `open/` (the BU's
    /// protocol numbers it so); its published name takes the next index of its lumi section
    /// among the files published there, so that a reader sees 0, 1, 2… ([`PublishedFile::index`]).
    pub fn publish(&self, ls: u32, index: u32) -> Result<PublishedFile> {
        let published = self.publish_raw(ls, index)?;
        self.write_index(&published)?;
        Ok(published)
    }

    /// The first half of [`RunDirectory::publish`]: notes the file in the ledger and renames it
    /// into the run directory. Its `.jsn` is [`RunDirectory::write_index`]'s, which may be
    /// tried again on its own when it finds the disk full.
    pub fn publish_raw(&self, ls: u32, index: u32) -> Result<PublishedFile> {
        let name = BuFileName::Raw { run: self.run, ls, index }.to_string();
        let open_path = self.path.join(names::OPEN_DIR).join(&name);
        let summary =
            read_complete_summary(&open_path)?.ok_or_else(|| RunDirError::Incomplete { path: open_path.clone() })?;
        let in_place = summary.orbits.is_none_or(|o| o.written > 0);
        // One publisher at a time: the ledger's order is the order of the published names.
        let mut numbers = self.published_in_place.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let published_index = numbers.get(&ls).copied().unwrap_or(0);
        // Noted before the rename: readers delete published files, so a restarted BU counts
        // its published files from here (an entry whose file is still in `open/` was not).
        let ledger = self.path.join(names::OPEN_DIR).join(PUBLISHED_LEDGER);
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ledger)
            .and_then(|mut f| writeln!(f, "{ls} {index} {}", summary.ledger_fields()))
            .map_err(io_err("writing", &ledger))?;
        let final_path = self.path.join(BuFileName::Raw { run: self.run, ls, index: published_index }.to_string());
        if in_place {
            fs::rename(&open_path, &final_path).map_err(io_err("publishing", &final_path))?;
            numbers.insert(ls, published_index + 1);
        } else {
            remove_empty(&open_path)?;
        }
        drop(numbers);
        remove_summary(&open_path)?;
        Ok(PublishedFile {
            path: final_path,
            ls,
            index: published_index,
            events: summary.events,
            bytes: summary.bytes,
            orbits: summary.orbits,
        })
    }

    /// Writes the `.jsn` of a file renamed into place by [`RunDirectory::publish_raw`].
    pub fn write_index(&self, file: &PublishedFile) -> Result<()> {
        if !file.is_in_place() {
            return Ok(());
        }
        let orbits = file.orbits.map(|o| o.written.into());
        let doc = IndexDoc { events: file.events.into(), bytes: file.bytes, orbits }
            .to_doc(&self.definition(names::RAW_DATA_JSD), &self.source);
        let jsn = self.path.join(BuFileName::IndexJson { run: self.run, ls: file.ls, index: file.index }.to_string());
        write_atomically(&jsn, doc.to_json().as_bytes())
    }

    /// Deletes what a failed write left of raw file `ls`/`index` in `open/`, if anything: the
    /// file is written again from the start.
    pub fn remove_partial(&self, ls: u32, index: u32) -> Result<()> {
        let path = self.path.join(names::OPEN_DIR).join(BuFileName::Raw { run: self.run, ls, index }.to_string());
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("removing partial file", &path)(e)),
            _ => Ok(()),
        }
    }

    /// Deletes the unpublished file `ls`/`index` from `open/` (its events went to another BU).
    pub fn discard(&self, ls: u32, index: u32) -> Result<()> {
        let path = self.path.join(names::OPEN_DIR).join(BuFileName::Raw { run: self.run, ls, index }.to_string());
        fs::remove_file(&path).map_err(io_err("discarding", &path))?;
        // An orbit file's counts beside it go with it: `open/` must be empty at the run's end.
        remove_summary(&path)
    }

    /// Reopens the run directory of a BU that restarted: deletes the partial files in `open/`
    /// (a crash cut them short) and returns what a restarted BU needs to know: its complete,
    /// unpublished files, and for each lumi section the next free file index.
    pub fn reopen(bu_dir: &Path, run: u32, source: &str) -> Result<(Self, Recovery)> {
        let path = bu_dir.join(names::run_dir_name(run));
        let open = path.join(names::OPEN_DIR);
        fs::create_dir_all(&open).map_err(io_err("creating", &open))?;
        let mut recovery = Recovery::default();
        for dir in [&path, &open] {
            for entry in fs::read_dir(dir).map_err(io_err("listing", dir))? {
                let entry = entry.map_err(io_err("listing", dir))?;
                // An orbit summary whose file was published (or never written) before the crash
                // has nothing left to say.
                let path = entry.path();
                if dir == &open && path.extension().is_some_and(|e| e == "orbits") && !path.with_extension("").exists()
                {
                    fs::remove_file(&path).map_err(io_err("removing", &path))?;
                    continue;
                }
                let Ok(BuFileName::Raw { run: r, ls, index }) = BuFileName::parse(&entry.file_name().to_string_lossy())
                else {
                    continue;
                };
                if r != run {
                    continue;
                }
                let next = recovery.next_index.entry(ls).or_default();
                *next = (*next).max(index + 1);
                if dir == &open {
                    if let Some(summary) = read_complete_summary(&entry.path())? {
                        recovery.unpublished.push((ls, index, summary.units()));
                    } else {
                        fs::remove_file(entry.path()).map_err(io_err("removing partial file", &entry.path()))?;
                        recovery.removed_partial.push(entry.path());
                    }
                }
            }
        }
        recovery.unpublished.sort_unstable();
        let ledger = open.join(PUBLISHED_LEDGER);
        let text = match fs::read_to_string(&ledger) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io_err("reading", &ledger)(e)),
        };
        let mut published_in_place: BTreeMap<u32, u32> = BTreeMap::new();
        for line in text.lines() {
            // A line cut short by the crash is of a file not yet renamed: it is still in `open/`.
            let fields: Vec<u64> = line.split(' ').filter_map(|f| f.parse().ok()).collect();
            let Some(&[ls, index]) = fields.get(..2).map(|f| <&[u64; 2]>::try_from(f).expect("two")) else { continue };
            let (Ok(ls), Ok(index), Some(summary)) =
                (u32::try_from(ls), u32::try_from(index), FileSummary::from_fields(&fields[2..]))
            else {
                continue;
            };
            if recovery.unpublished.iter().any(|&(l, i, _)| (l, i) == (ls, index)) {
                continue;
            }
            // Published names were given in the ledger's order, to the files renamed into place.
            if recovery.published.insert((ls, index), summary).is_none() && summary.orbits.is_none_or(|o| o.written > 0)
            {
                let name = published_in_place.entry(ls).or_default();
                recovery.published_names.insert((ls, *name));
                *name += 1;
            }
            let next = recovery.next_index.entry(ls).or_default();
            *next = (*next).max(index + 1);
        }
        let dir =
            RunDirectory { path, run, source: source.to_owned(), published_in_place: Mutex::new(published_in_place) };
        dir.finish_interrupted_writes(&mut recovery)?;
        Ok((dir, recovery))
    }

    /// Finishes what a crash interrupted in the run directory itself: a half-written JSON
    /// document (`*.tmp`, which was never renamed into place) is deleted, and a raw file that was
    /// published (renamed out of `open/`) before its `.jsn` was written gets its `.jsn` now, from
    /// its header, as `publish` would have written it.
    fn finish_interrupted_writes(&self, recovery: &mut Recovery) -> Result<()> {
        // Listed first: the repairs below write files of their own.
        let mut listing = Vec::new();
        for entry in fs::read_dir(&self.path).map_err(io_err("listing", &self.path))? {
            let entry = entry.map_err(io_err("listing", &self.path))?;
            listing.push((entry.path(), entry.file_name().to_string_lossy().into_owned()));
        }
        listing.sort();
        for (path, name) in listing {
            if names::is_temporary(&name) {
                fs::remove_file(&path).map_err(io_err("removing partial file", &path))?;
                recovery.removed_partial.push(path);
                continue;
            }
            let Ok(BuFileName::Raw { run, ls, index }) = BuFileName::parse(&name) else { continue };
            let jsn = self.path.join(BuFileName::IndexJson { run, ls, index }.to_string());
            if run != self.run || jsn.exists() {
                continue;
            }
            // An orbit file has no header: the ledger, written before the rename, has its counts.
            let summary = match recovery.published.get(&(ls, index)) {
                Some(s) => *s,
                None => read_complete_summary(&path)?.ok_or_else(|| RunDirError::Incomplete { path: path.clone() })?,
            };
            let orbits = summary.orbits.map(|o| o.written.into());
            let doc = IndexDoc { events: summary.events.into(), bytes: summary.bytes, orbits }
                .to_doc(&self.definition(names::RAW_DATA_JSD), &self.source);
            write_atomically(&jsn, doc.to_json().as_bytes())?;
            recovery.completed_publications.push(path);
        }
        Ok(())
    }

    /// Writes the end-of-lumi record of `ls`, after checking that its counts close and that all
    /// of its raw files are published.
    pub fn end_lumi_section(&self, ls: u32, eols: &EolsDoc) -> Result<()> {
        if !eols.is_complete() {
            return Err(RunDirError::LumiNotClosed {
                ls,
                events: eols.events,
                lost: eols.lost_events,
                total: eols.total_events,
            });
        }
        // Every file the record counts must have left open/: published, and perhaps already
        // claimed or processed and removed by an FU, so the run directory cannot be counted.
        let open = self.path.join(names::OPEN_DIR);
        let unpublished = (0..eols.files)
            .filter(|&i| {
                let index = u32::try_from(i).unwrap_or(u32::MAX);
                open.join(BuFileName::Raw { run: self.run, ls, index }.to_string()).exists()
            })
            .count() as u64;
        if unpublished > 0 {
            return Err(RunDirError::LumiFilesUnpublished { ls, files: eols.files, unpublished });
        }
        let doc = eols.to_doc(&self.definition(names::EOLS_JSD), &self.source);
        let path = self.path.join(BuFileName::EndOfLumi { run: self.run, ls }.to_string());
        write_atomically(&path, doc.to_json().as_bytes())
    }

    /// Writes the end-of-run record and removes `open/`.
    pub fn end_run(&self, eor: &EorDoc) -> Result<()> {
        let doc = eor.to_doc(&self.definition(names::EOR_JSD), &self.source);
        let path = self.path.join(BuFileName::EndOfRun { run: self.run }.to_string());
        write_atomically(&path, doc.to_json().as_bytes())?;
        let open = self.path.join(names::OPEN_DIR);
        let ledger = open.join(PUBLISHED_LEDGER);
        match fs::remove_file(&ledger) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("removing", &ledger)(e)),
        }
        fs::remove_dir(&open).map_err(io_err("removing", &open))
    }
}

/// The ledger of published files in `open/`: a line `LS INDEX EVENTS BYTES` a file, written
/// before the file is renamed into place; removed with `open/` at the end of the run.
pub const PUBLISHED_LEDGER: &str = "published";

/// Most slices handed to one vectored write (the kernel's limit, `IOV_MAX`, is 1024).
const MAX_SLICES: usize = 1024;

/// Writes all of `slices` to `out` (the file at `path`), at most [`MAX_SLICES`] a system call,
/// again after a write the kernel took only part of; returns the bytes written.
pub(crate) fn write_slices(out: &mut File, path: &Path, mut slices: &mut [IoSlice<'_>]) -> Result<u64> {
    let mut bytes = 0;
    while !slices.is_empty() {
        let batch = slices.len().min(MAX_SLICES);
        let written = match out.write_vectored(&slices[..batch]) {
            Ok(0) => return Err(io_err("writing", path)(io::ErrorKind::WriteZero.into())),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("writing", path)(e)),
        };
        bytes += written as u64;
        IoSlice::advance_slices(&mut slices, written);
    }
    Ok(bytes)
}

/// One event to append with [`RawFileWriter::append_events`]: its fragments, given as byte
/// slices in payload order, become an FRD v6 record.
#[derive(Debug, Clone, Copy)]
pub struct EventPieces<'a> {
    /// The FRD flags.
    pub flags: u16,
    /// The event number.
    pub event: u32,
    /// The fragments, in payload order.
    pub fragments: &'a [&'a [u8]],
}

/// A raw file being written under `open/`: every record goes to the file with vectored writes
/// straight from the slices it is given (no buffer of the writer's own, so no copy).
#[derive(Debug)]
pub struct RawFileWriter {
    out: File,
    open_path: PathBuf,
    run: u32,
    ls: u32,
    index: u32,
    data_type: u16,
    events: u32,
    bytes: u64,
}

impl RawFileWriter {
    /// Appends one FRD record (header and payload). Its header is checked, so that a file never
    /// holds a record its readers could not walk past.
    pub fn append(&mut self, record: &[u8]) -> Result<()> {
        let header = FrdHeader::parse(record).map_err(|source| RunDirError::Record {
            path: self.open_path.clone(),
            index: self.events,
            source,
        })?;
        if header.record_bytes() != record.len() {
            return Err(RunDirError::Record {
                path: self.open_path.clone(),
                index: self.events,
                source: FormatError::Truncated {
                    what: "FRD event payload",
                    offset: 0,
                    needed: header.record_bytes(),
                    available: record.len(),
                },
            });
        }
        self.write_record(&[record])
    }

    /// Appends one event as an FRD v6 record built from its fragments, given as byte slices in
    /// payload order (written straight from where they are, no assembly buffer): the header's
    /// size and CRC-32C are computed here, run and lumi section are the file's.
    pub fn append_event(&mut self, flags: u16, event: u32, fragments: &[&[u8]]) -> Result<()> {
        self.append_events(&[EventPieces { flags, event, fragments }])
    }

    /// Appends events as [`RawFileWriter::append_event`] does each, in as few vectored writes
    /// as the kernel takes slices for.
    pub fn append_events(&mut self, events: &[EventPieces<'_>]) -> Result<()> {
        let heads = events.iter().map(|e| self.frd_header(e)).collect::<Result<Vec<_>>>()?;
        let count = u32::try_from(events.len())
            .ok()
            .and_then(|n| self.events.checked_add(n))
            .ok_or_else(|| RunDirError::TooLarge { path: self.open_path.clone(), what: "event count" })?;
        let mut slices = Vec::with_capacity(events.iter().map(|e| 1 + e.fragments.len()).sum());
        for (event, head) in events.iter().zip(&heads) {
            slices.push(IoSlice::new(head));
            slices.extend(event.fragments.iter().map(|f| IoSlice::new(f)));
        }
        self.write_slices(&mut slices)?;
        self.events = count;
        Ok(())
    }

    /// The FRD v6 header of `event`, in the file's run and lumi section.
    fn frd_header(&self, event: &EventPieces<'_>) -> Result<[u8; FRD_HEADER_BYTES]> {
        let payload: usize = event.fragments.iter().map(|f| f.len()).sum();
        let payload_bytes = u32::try_from(payload)
            .map_err(|_| RunDirError::TooLarge { path: self.open_path.clone(), what: "FRD payload size" })?;
        let mut crc = Crc32c::new();
        for f in event.fragments {
            crc.update(f);
        }
        let header = FrdHeader {
            version: FRD_VERSION,
            flags: event.flags,
            run: self.run,
            lumi_section: self.ls,
            event: event.event,
            payload_bytes,
            crc32c: crc.finish(),
        };
        Ok(header.to_bytes())
    }

    fn write_record(&mut self, pieces: &[&[u8]]) -> Result<()> {
        let count = self
            .events
            .checked_add(1)
            .ok_or_else(|| RunDirError::TooLarge { path: self.open_path.clone(), what: "event count" })?;
        let mut slices: Vec<IoSlice<'_>> = pieces.iter().map(|p| IoSlice::new(p)).collect();
        self.write_slices(&mut slices)?;
        self.events = count;
        Ok(())
    }

    fn write_slices(&mut self, slices: &mut [IoSlice<'_>]) -> Result<()> {
        self.bytes += write_slices(&mut self.out, &self.open_path, slices)?;
        Ok(())
    }

    /// Records written so far.
    pub fn events(&self) -> u32 {
        self.events
    }

    /// Bytes written so far, header included.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// A raw file closed in `open/`, complete and unpublished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosedFile {
    /// Its lumi section.
    pub ls: u32,
    /// Its index within the lumi section, in its published name: files are numbered as they are
    /// published, from 0 in each lumi section (an orbit file of no orbit takes no number).
    pub index: u32,
    /// Records it holds.
    pub events: u32,
    /// Its size, header included.
    pub bytes: u64,
}

/// What a restarted BU finds in its run directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Complete, unpublished files in `open/`, as (lumi section, index, the protocol's units in
    /// it: events, or an orbit file's orbits).
    pub unpublished: Vec<(u32, u32, u32)>,
    /// Partial files deleted: raw files cut short in `open/`, JSON documents never renamed into
    /// place.
    pub removed_partial: Vec<PathBuf>,
    /// Raw files published before a crash whose `.jsn` was written at the restart.
    pub completed_publications: Vec<PathBuf>,
    /// Next free file index per lumi section.
    pub next_index: std::collections::BTreeMap<u32, u32>,
    /// Every file published before the restart, (lumi section, index) → what it holds, as the
    /// ledger in `open/` says: the files themselves may be gone (readers delete them). The index
    /// is the one it had in `open/`.
    pub published: std::collections::BTreeMap<(u32, u32), FileSummary>,
    /// The (lumi section, index) of the published names of those files that are in the run
    /// directory (not the orbit files of no orbit): files are numbered as they are published.
    pub published_names: std::collections::BTreeSet<(u32, u32)>,
}

/// The header of a raw file if the file is complete: a header that parses and announces the
/// file's actual size. A file still being written has a zeroed header.
fn read_complete_header(path: &Path) -> Result<Option<RawFileHeader>> {
    use std::io::Read;
    let mut head = [0u8; RAW_V2_HEADER_BYTES];
    let mut f = File::open(path).map_err(io_err("opening", path))?;
    let size = f.metadata().map_err(io_err("reading the size of", path))?.len();
    if f.read_exact(&mut head).is_err() {
        return Ok(None);
    }
    Ok(RawFileHeader::parse(&head).ok().filter(|h| h.file_bytes == size))
}

/// What a complete raw file in `open/` holds: an orbit file's summary beside it, or an event
/// file's header; `None` for a file still being written.
fn read_complete_summary(path: &Path) -> Result<Option<FileSummary>> {
    if let Some(summary) = read_orbit_summary(path)? {
        return Ok(Some(summary));
    }
    Ok(read_complete_header(path)?.map(|h| FileSummary { events: h.event_count, bytes: h.file_bytes, orbits: None }))
}

/// A raw file published in the run directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its lumi section.
    pub ls: u32,
    /// Its index within the lumi section.
    pub index: u32,
    /// Records it holds.
    pub events: u32,
    /// Its size, header included.
    pub bytes: u64,
    /// An orbit file's orbits (its records are then events, in [`PublishedFile::events`]).
    pub orbits: Option<OrbitCounts>,
}

impl PublishedFile {
    /// Whether the file is in the run directory: always, but for an orbit file of no orbit,
    /// which is counted and removed rather than published.
    pub fn is_in_place(&self) -> bool {
        self.orbits.is_none_or(|o| o.written > 0)
    }

    /// The file's units in the protocol: its orbits in orbit mode, else its events.
    pub fn units(&self) -> u32 {
        self.orbits.map_or(self.events, |o| o.orbits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_of_one_file_at_once_never_take_each_others_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("streamOutput.jsd");
        std::thread::scope(|s| {
            for writer in 0..4u8 {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..200 {
                        write_atomically(path, &[writer; 64]).unwrap();
                    }
                });
            }
        });
        let bytes = fs::read(&path).unwrap();
        assert!(bytes.len() == 64 && bytes.iter().all(|&b| b == bytes[0]), "one writer's bytes, whole");
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["streamOutput.jsd"], "no temporary file left");
    }
}
