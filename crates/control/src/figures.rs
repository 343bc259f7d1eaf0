//! The figures a unit's statistics give, each with the name, type and help of its metric family:
//! read into the units' views (`/api/v1/units`) and written as OpenMetrics (`/metrics`).

use tessera_runtime::stats::UnitStats;

/// A metric family: name, type, help, and how to read it from a unit's figures (a figure a
/// kind of unit does not keep reads 0).
pub(crate) struct Family {
    pub(crate) name: &'static str,
    pub(crate) kind: &'static str,
    pub(crate) help: &'static str,
    pub(crate) read: fn(&UnitStats) -> f64,
}

pub(crate) const FAMILIES: &[Family] = &[
    Family {
        name: "tessera_fragments_total",
        kind: "counter",
        help: "FED fragments received.",
        read: |s| s.fragments.get() as f64,
    },
    Family {
        name: "tessera_fragment_bytes_total",
        kind: "counter",
        help: "Bytes of FED fragments received, header to trailer.",
        read: |s| s.fragment_bytes.get() as f64,
    },
    Family {
        name: "tessera_corrupt_fragments_total",
        kind: "counter",
        help: "Fragments that failed a check and were passed on flagged.",
        read: |s| s.corrupt_fragments.get() as f64,
    },
    Family {
        name: "tessera_broken_streams_total",
        kind: "counter",
        help: "FEROL streams that could not be read on.",
        read: |s| s.broken_streams.get() as f64,
    },
    Family {
        name: "tessera_events_buffered",
        kind: "gauge",
        help: "Events whose fragments an RU holds.",
        read: |s| s.events_buffered.get() as f64,
    },
    Family {
        name: "tessera_receive_chunks_used",
        kind: "gauge",
        help: "Receive chunks of an RU holding fragments.",
        read: |s| s.chunks_used.get() as f64,
    },
    Family {
        name: "tessera_receive_chunks",
        kind: "gauge",
        help: "Receive chunks of an RU in all.",
        read: |s| s.chunks_total.get() as f64,
    },
    Family {
        name: "tessera_events_triggered_total",
        kind: "counter",
        help: "Events triggered (EVM).",
        read: |s| s.triggered.get() as f64,
    },
    Family {
        name: "tessera_events_committed_total",
        kind: "counter",
        help: "Events committed (EVM).",
        read: |s| s.committed.get() as f64,
    },
    Family {
        name: "tessera_events_reassigned_total",
        kind: "counter",
        help: "Events reassigned after a BU was lost (EVM).",
        read: |s| s.reassigned.get() as f64,
    },
    Family {
        name: "tessera_events_lost_lumi_section_closed_total",
        kind: "counter",
        help: "Events lost because they came after their lumi section had closed (EVM, LUMI_SECTION_CLOSED).",
        read: |s| s.lost_lumi_closed.get() as f64,
    },
    Family {
        name: "tessera_events_built_total",
        kind: "counter",
        help: "Events built (BU).",
        read: |s| s.events_built.get() as f64,
    },
    Family {
        name: "tessera_events_incomplete_total",
        kind: "counter",
        help: "Events built with a part missing (BU).",
        read: |s| s.incomplete_events.get() as f64,
    },
    Family {
        name: "tessera_push_aged_events_total",
        kind: "counter",
        help: "Push: events a BU shipped incomplete because they aged (a part never came in time).",
        read: |s| s.aged_events.get() as f64,
    },
    Family {
        name: "tessera_push_late_parts_total",
        kind: "counter",
        help: "Push: super-fragments that reached a BU after their event was shipped, dropped.",
        read: |s| s.late_parts.get() as f64,
    },
    Family {
        name: "tessera_push_parts_unsent_total",
        kind: "counter",
        help: "Push: super-fragments an RU did not send, their BU excluded or unreachable.",
        read: |s| s.parts_unsent.get() as f64,
    },
    Family {
        name: "tessera_push_bus_excluded_total",
        kind: "counter",
        help: "Push: BUs RU 0 excluded after their loss.",
        read: |s| s.bus_excluded.get() as f64,
    },
    Family {
        name: "tessera_push_events_to_excluded_total",
        kind: "counter",
        help: "Push: events given to BUs before their exclusion (those unpublished are lost, BU_LOST).",
        read: |s| s.events_to_excluded.get() as f64,
    },
    Family {
        name: "tessera_events_published_total",
        kind: "counter",
        help: "Events (orbit mode: orbits) published in raw files in the run, by every incarnation (BU).",
        read: |s| s.events_published.get() as f64,
    },
    Family {
        name: "tessera_files_published_total",
        kind: "counter",
        help: "Raw files published where readers see them (BU).",
        read: |s| s.files_published.get() as f64,
    },
    Family {
        name: "tessera_orbit_blocks_left_out_total",
        kind: "counter",
        help: "Orbit mode: orbit blocks left out of their orbits, each making its orbit incomplete (BU).",
        read: |s| s.orbit_blocks_left_out.get() as f64,
    },
    Family {
        name: "tessera_published_bytes_total",
        kind: "counter",
        help: "Bytes of raw files published (BU).",
        read: |s| s.bytes_published.get() as f64,
    },
    Family {
        name: "tessera_store_bytes",
        kind: "gauge",
        help: "Bytes of received data a BU holds until written.",
        read: |s| s.store_bytes.get() as f64,
    },
    Family {
        name: "tessera_events_in_flight",
        kind: "gauge",
        help: "Events a BU holds, from request to publication.",
        read: |s| s.events_in_flight.get() as f64,
    },
    Family {
        name: "tessera_ramdisk_used_ratio",
        kind: "gauge",
        help: "How full the file system of a BU's run directory is.",
        read: |s| s.ramdisk_used_percent.get() as f64 / 100.0,
    },
    Family {
        name: "tessera_fu_processes",
        kind: "gauge",
        help: "FU processes behind a BU whose resource summaries are live.",
        read: |s| s.fu_processes.get() as f64,
    },
    Family {
        name: "tessera_fu_free_slots",
        kind: "gauge",
        help: "Free processing slots of the FUs behind a BU.",
        read: |s| s.fu_free_slots.get() as f64,
    },
    Family {
        name: "tessera_fu_queued_lumi_sections",
        kind: "gauge",
        help: "Lumi sections the FUs behind a BU lag behind, at the most lagging one.",
        read: |s| s.fu_queued_lumi_sections.get() as f64,
    },
    Family {
        name: "tessera_fu_output_bytes_per_second",
        kind: "gauge",
        help: "Bytes per second the FUs behind a BU write into their outputs.",
        read: |s| s.fu_output_bytes_per_s.get() as f64,
    },
    Family {
        name: "tessera_fu_cpu_seconds_total",
        kind: "counter",
        help: "CPU time of the FU processes behind a BU, each as it last said in its resource summary.",
        read: |s| s.fu_cpu_ms.get() as f64 / 1e3,
    },
    Family {
        name: "tessera_lumi_section",
        kind: "gauge",
        help: "The highest lumi section a BU has written a file of.",
        read: |s| s.lumi_section.get() as f64,
    },
    Family {
        name: "tessera_lumi_sections_closed_total",
        kind: "counter",
        help: "Lumi sections a BU has closed (end-of-lumi record written).",
        read: |s| s.lumi_sections_closed.get() as f64,
    },
    Family {
        name: "tessera_last_closed_lumi_section",
        kind: "gauge",
        help: "The highest lumi section a BU has closed.",
        read: |s| s.last_closed_lumi_section.get() as f64,
    },
    Family {
        name: "tessera_last_closed_lumi_section_events",
        kind: "gauge",
        help: "Events a BU published in the highest lumi section it has closed.",
        read: |s| s.last_closed_lumi_section_events.get() as f64,
    },
    Family {
        name: "tessera_data_messages_total",
        kind: "counter",
        help: "Data messages sent or received.",
        read: |s| s.data_messages.get() as f64,
    },
    Family {
        name: "tessera_control_messages_total",
        kind: "counter",
        help: "Control messages sent.",
        read: |s| s.control_messages.get() as f64,
    },
    Family {
        name: "tessera_links_refused_total",
        kind: "counter",
        help: "Protocol connections refused before their peer reached the unit (no valid link opening in time).",
        read: |s| s.links_refused.get() as f64,
    },
    Family {
        name: "tessera_loop_cpu_seconds_total",
        kind: "counter",
        help: "CPU time of the unit's loop thread.",
        read: |s| s.loop_cpu_ns.get() as f64 / 1e9,
    },
    Family {
        name: "tessera_loop_heartbeats_total",
        kind: "counter",
        help: "Beats of the unit's loop; a count that stops moving means a stalled unit.",
        read: |s| s.heartbeats.get() as f64,
    },
    Family {
        name: "tessera_problems_total",
        kind: "counter",
        help: "Problems the unit reported.",
        read: |s| s.problem_count() as f64,
    },
    Family {
        name: "tessera_unit_failed",
        kind: "gauge",
        help: "1 if the unit ended by an error.",
        read: |s| f64::from(u8::from(s.failed())),
    },
    Family {
        name: "tessera_run_started",
        kind: "gauge",
        help: "1 once the run has started: every stream of every RU connected (EVM).",
        read: |s| s.run_started.get() as f64,
    },
    Family {
        name: "tessera_trigger_began_timestamp_seconds",
        kind: "gauge",
        help: "When the trigger began, in seconds since the Unix epoch (EVM; 0 before).",
        read: |s| s.trigger_began_unix_us.get() as f64 / 1e6,
    },
    Family {
        name: "tessera_trigger_latest_timestamp_seconds",
        kind: "gauge",
        help: "When the trigger last triggered an event, in seconds since the Unix epoch (EVM; 0 before).",
        read: |s| s.trigger_latest_unix_us.get() as f64 / 1e6,
    },
    Family {
        name: "tessera_streams_missing",
        kind: "gauge",
        help: "FED streams of an RU not yet connected: the run starts once none is.",
        read: |s| s.streams_missing().len() as f64,
    },
    Family {
        name: "tessera_fed_wait_seconds",
        kind: "gauge",
        help: "How long the event an RU has waited for longest has waited for a FED's fragment (0 when none waits).",
        read: |s| s.waiting().map_or(0.0, |(_, waited)| waited.as_secs_f64()),
    },
];
