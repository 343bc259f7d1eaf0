//! Tests of the JSON bookkeeping files: exact bytes, round trips, and the errors that name the entry.

use super::*;
use proptest::prelude::*;

fn json_problem<T: fmt::Debug>(r: Result<T>) -> (&'static str, String, String) {
    match r {
        Err(FormatError::Json { what, field, problem }) => (what, field, problem),
        other => panic!("expected a JSON error, got {other:?}"),
    }
}

#[test]
fn legends_are_written_exactly() {
    assert_eq!(
        Legend::raw_data().to_json(),
        r#"{"legend":[{"name":"NEvents","operation":"sum","type":"integer"},{"name":"NBytes","operation":"sum","type":"integer"}]}"#
    );
    assert_eq!(
        Legend::eols().to_json(),
        concat!(
            r#"{"legend":[{"name":"NEvents","operation":"sum","type":"integer"},"#,
            r#"{"name":"NFiles","operation":"sum","type":"integer"},"#,
            r#"{"name":"TotalEvents","operation":"sum","type":"integer"},"#,
            r#"{"name":"NLostEvents","operation":"sum","type":"integer"},"#,
            r#"{"name":"NBytes","operation":"sum","type":"integer"}]}"#
        )
    );
    assert_eq!(
        Legend::eor().to_json(),
        concat!(
            r#"{"legend":[{"name":"NEvents","operation":"sum","type":"integer"},"#,
            r#"{"name":"NFiles","operation":"sum","type":"integer"},"#,
            r#"{"name":"NLumis","operation":"same","type":"integer"},"#,
            r#"{"name":"LastLumi","operation":"same","type":"integer"}]}"#
        )
    );
    assert_eq!(
        Legend::fu_output().to_json(),
        concat!(
            r#"{"legend":[{"name":"Processed","operation":"sum","type":"integer"},"#,
            r#"{"name":"Accepted","operation":"sum","type":"integer"},"#,
            r#"{"name":"ErrorEvents","operation":"sum","type":"integer"},"#,
            r#"{"name":"ReturnCodeMask","operation":"binaryOr","type":"integer"},"#,
            r#"{"name":"Filelist","operation":"merge","type":"string"},"#,
            r#"{"name":"Filesize","operation":"sum","type":"integer"},"#,
            r#"{"name":"InputFiles","operation":"cat","type":"string"},"#,
            r#"{"name":"FileAdler32","operation":"adler32","type":"integer"},"#,
            r#"{"name":"TransferDestination","operation":"same","type":"string"},"#,
            r#"{"name":"MergeType","operation":"same","type":"string"},"#,
            r#"{"name":"HLTErrorEvents","operation":"sum","type":"integer"}]}"#
        )
    );
    for legend in [Legend::raw_data(), Legend::eols(), Legend::eor(), Legend::fu_output()] {
        assert_eq!(Legend::parse(&legend.to_json()).unwrap(), legend);
    }
}

#[test]
fn legend_errors_name_the_entry() {
    let cases = [
        (
            r#"{"legend":[{"name":"A","operation":"sum","type":"integer"},{"name":"B","operation":"max","type":"integer"}]}"#,
            "legend[1].operation",
            r#"unknown operation "max"; expected one of sum, binaryOr, same, cat, merge, adler32"#,
        ),
        (r#"{"legend":[{"name":"A","operation":"sum"}]}"#, "legend[0].type", "missing"),
        (
            r#"{"legend":[{"name":"A","operation":"sum","type":"float"}]}"#,
            "legend[0].type",
            r#"unknown type "float"; expected one of integer, string"#,
        ),
        (
            r#"{"legend":[{"name":7,"operation":"sum","type":"integer"}]}"#,
            "legend[0].name",
            "expected a string, found a number",
        ),
        (
            r#"{"legend":[{"name":"A","operation":"sum","type":"integer"},{"name":"A","operation":"sum","type":"integer"}]}"#,
            "legend[1].name",
            r#"duplicate field name "A""#,
        ),
        (r#"{"legend":["A"]}"#, "legend[0]", "expected an object, found a string"),
        (r#"{"legend":{}}"#, "legend", "expected an array, found an object"),
        (r#"{}"#, "legend", "missing"),
        (r#"[]"#, "(document)", "expected an object, found an array"),
    ];
    for (text, field, problem) in cases {
        assert_eq!(json_problem(Legend::parse(text)), (".jsd legend", field.to_owned(), problem.to_owned()), "{text}");
    }
}

#[test]
fn index_doc_is_written_exactly() {
    let doc = IndexDoc { events: 12, bytes: 4096, orbits: None }
        .to_doc("/fff/ramdisk/run000001/jsd/rawData.jsd", "bu-c2e18-01");
    let text = doc.to_json();
    assert_eq!(
        text,
        r#"{"data":["12","4096"],"definition":"/fff/ramdisk/run000001/jsd/rawData.jsd","source":"bu-c2e18-01"}"#
    );
    assert_eq!(JsonDoc::parse(IndexDoc::WHAT, &text).unwrap(), doc);
    assert_eq!(IndexDoc::parse(&text).unwrap(), IndexDoc { events: 12, bytes: 4096, orbits: None });
}

#[test]
fn bu_docs_are_written_exactly() {
    let eols = EolsDoc { events: 90, files: 3, total_events: 100, lost_events: 10, bytes: 123456, orbits: None };
    assert!(eols.is_complete());
    assert!(!EolsDoc { lost_events: 9, ..eols }.is_complete());
    assert!(!EolsDoc { events: u64::MAX, ..eols }.is_complete());
    let text = eols.to_doc("jsd/EoLS.jsd", "bu").to_json();
    assert_eq!(text, r#"{"data":["90","3","100","10","123456"],"definition":"jsd/EoLS.jsd","source":"bu"}"#);
    assert_eq!(EolsDoc::parse(&text).unwrap(), eols);

    let eor = EorDoc { events: 1000, files: 30, lumis: 7, last_lumi: 7, orbits: None };
    let text = eor.to_doc("jsd/EoR.jsd", "bu").to_json();
    assert_eq!(text, r#"{"data":["1000","30","7","7"],"definition":"jsd/EoR.jsd","source":"bu"}"#);
    assert_eq!(EorDoc::parse(&text).unwrap(), eor);
}

#[test]
fn orbit_mode_docs_carry_their_orbit_counts_after_the_event_fields_and_match_their_legends() {
    let [raw, eols_legend, eor_legend] = Legend::run_directory(true);
    let index = IndexDoc { events: 130, bytes: 250_000, orbits: Some(2) };
    let text = index.to_doc("jsd/rawData.jsd", "bu").to_json();
    assert_eq!(text, r#"{"data":["130","250000","2"],"definition":"jsd/rawData.jsd","source":"bu"}"#);
    assert_eq!(IndexDoc::parse(&text).unwrap(), index);
    assert_eq!(raw.position("NOrbits"), Some(2));

    let orbits = Some(OrbitCounts { orbits: 16384, empty_orbits: 2600 });
    let eols = EolsDoc { events: 29000, files: 17, total_events: 29000, lost_events: 0, bytes: 9, orbits };
    let text = eols.to_doc("jsd/EoLS.jsd", "bu").to_json();
    assert_eq!(
        text,
        r#"{"data":["29000","17","29000","0","9","16384","2600"],"definition":"jsd/EoLS.jsd","source":"bu"}"#
    );
    assert_eq!(EolsDoc::parse(&text).unwrap(), eols);
    assert_eq!((eols_legend.position("NOrbits"), eols_legend.position("NEmptyOrbits")), (Some(5), Some(6)));

    let eor = EorDoc { events: 29000, files: 17, lumis: 1, last_lumi: 1, orbits };
    let text = eor.to_doc("jsd/EoR.jsd", "bu").to_json();
    assert_eq!(text, r#"{"data":["29000","17","1","1","16384","2600"],"definition":"jsd/EoR.jsd","source":"bu"}"#);
    assert_eq!(EorDoc::parse(&text).unwrap(), eor);
    assert_eq!(eor_legend.fields.len(), 6);
    // Six values are neither an event mode EoLS (five) nor an orbit mode one (seven).
    assert!(EolsDoc::parse(r#"{"data":["1","1","1","0","9","3"],"definition":"d","source":"bu"}"#).is_err());
    assert_eq!(Legend::run_directory(false), [Legend::raw_data(), Legend::eols(), Legend::eor()]);
}

#[test]
fn fu_output_doc_is_written_exactly() {
    let out = FuOutputDoc {
        accepted: 5,
        return_code_mask: 2,
        file_list: "run000001_ls0001_streamA_pid01234.dat".into(),
        file_size: 1000,
        input_files: "run000001_ls0001_index000000.raw".into(),
        file_adler32: 0x11E60398,
        transfer_destination: "Tier0".into(),
        merge_type: "DAT".into(),
        ..FuOutputDoc::empty(10)
    };
    let text = out.to_doc("/fff/output/run000001/jsd/streamA.jsd", "pid01234").to_json();
    assert_eq!(
        text,
        concat!(
            r#"{"data":["10","5","0","2","run000001_ls0001_streamA_pid01234.dat","1000","#,
            r#""run000001_ls0001_index000000.raw","300286872","Tier0","DAT","0"],"#,
            r#""definition":"/fff/output/run000001/jsd/streamA.jsd","source":"pid01234"}"#
        )
    );
    assert_eq!(FuOutputDoc::parse(&text).unwrap(), out);
    let empty = FuOutputDoc::empty(7).to_doc("d", "s");
    assert_eq!(empty.data, ["7", "0", "0", "0", "", "0", "", "-1", "", "", "0"]);
    assert_eq!(FuOutputDoc::from_doc(&empty).unwrap(), FuOutputDoc::empty(7));
}

#[test]
fn doc_errors_name_the_field() {
    let cases = [
        (r#"{"data":["12"],"definition":"d","source":"s"}"#, "data", "expected 2 values (NEvents, NBytes), found 1"),
        (r#"{"data":["12","12x"],"definition":"d","source":"s"}"#, "NBytes", r#""12x" is not an unsigned integer"#),
        (r#"{"data":["-1","12"],"definition":"d","source":"s"}"#, "NEvents", r#""-1" is not an unsigned integer"#),
        (r#"{"data":[""," 1"],"definition":"d","source":"s"}"#, "NEvents", r#""" is not an unsigned integer"#),
        (
            r#"{"data":["1","18446744073709551616"],"definition":"d","source":"s"}"#,
            "NBytes",
            r#""18446744073709551616" does not fit in 64 bits"#,
        ),
        (r#"{"definition":"d","source":"s"}"#, "data", "missing"),
        (r#"{"data":"12","definition":"d","source":"s"}"#, "data", "expected an array, found a string"),
        (r#"{"data":["1",null],"definition":"d","source":"s"}"#, "data[1]", "expected a string, found null"),
        (r#"{"data":["1","2"],"source":"s"}"#, "definition", "missing"),
        (r#"{"data":["1","2"],"definition":"d","source":3}"#, "source", "expected a string, found a number"),
        ("12", "(document)", "expected an object, found a number"),
    ];
    for (text, field, problem) in cases {
        assert_eq!(json_problem(IndexDoc::parse(text)), ("index JSON", field.to_owned(), problem.to_owned()), "{text}");
    }
    let (what, field, problem) = json_problem(IndexDoc::parse("{\"data\": [\"1\",\n  \"2\""));
    assert_eq!((what, field.as_str()), ("index JSON", "(document)"));
    assert_eq!(problem, "EOF while parsing a list at line 2 column 5");
    let err = IndexDoc::parse(r#"{"data":["12"],"definition":"d","source":"s"}"#).unwrap_err();
    assert_eq!(err.to_string(), "index JSON: field data: expected 2 values (NEvents, NBytes), found 1");
    // Numbers are read as their text.
    assert_eq!(IndexDoc::parse(r#"{"data":[12,4096],"definition":"d","source":"s"}"#).unwrap().bytes, 4096);

    let mut out = FuOutputDoc::empty(1).to_doc("d", "s");
    out.data[7] = "4294967296".into();
    assert_eq!(
        json_problem(FuOutputDoc::from_doc(&out)),
        ("FU output JSON", "FileAdler32".to_owned(), r#""4294967296" is not -1 or a 32-bit checksum"#.to_owned())
    );
}

#[test]
fn adler32_check_values() {
    assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    assert_eq!(adler32(b""), 1);
    assert_eq!(adler32(b"a"), 0x0062_0062);
    // A long run of 0xFF crosses many reductions with the sums near their bound.
    let ones = vec![0xFFu8; 100_000];
    let mut piecewise = Adler32::new();
    for piece in ones.chunks(777) {
        piecewise.update(piece);
    }
    assert_eq!(piecewise.finish(), adler32(&ones));
    assert_eq!(adler32(&ones), naive_adler32(&ones));
}

/// The definition, with the sums kept exact in u128.
fn naive_adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u128, 0u128);
    for &x in bytes {
        a += u128::from(x);
        b += a;
    }
    ((b % 65521) << 16 | (a % 65521)) as u32
}

#[test]
fn adler32_combine_with_huge_second_length() {
    // n2 zero bytes have checksum (A = 1, B = n2); appended to data, each leaves A at A1 and
    // adds A1 to B, so the concatenation has (A1, B1 + n2·A1).
    let first = adler32(b"some data");
    let (a1, b1) = (u128::from(first & 0xFFFF), u128::from(first >> 16));
    for n2 in [1u64 << 40, u64::MAX, 65521 * 12345, 65520] {
        let zeros = ((u128::from(n2) % 65521) << 16 | 1) as u32;
        let b = (b1 + u128::from(n2) * a1) % 65521;
        assert_eq!(adler32_combine(first, zeros, n2), ((b << 16) | a1) as u32, "{n2}");
    }
    assert_eq!(adler32_combine(first, 1, 0), first);
    assert_eq!(adler32_combine(1, first, 9), first);
}

fn fu_input(content: &[u8], name: &str, input: &str, mask: u64, destination: &str) -> JsonDoc {
    FuOutputDoc {
        accepted: 2,
        error_events: 1,
        return_code_mask: mask,
        file_list: name.into(),
        file_size: content.len() as u64,
        input_files: input.into(),
        file_adler32: adler32(content).into(),
        transfer_destination: destination.into(),
        merge_type: "DAT".into(),
        hlt_error_events: 3,
        ..FuOutputDoc::empty(10)
    }
    .to_doc("jsd/streamA.jsd", "pid00001")
}

#[test]
fn merges_fu_outputs() {
    let files: [&[u8]; 3] = [b"first file, ", b"second file and ", b"third"];
    let empty = FuOutputDoc { input_files: "".into(), transfer_destination: "Tier0".into(), ..FuOutputDoc::empty(4) };
    let inputs = [
        fu_input(files[0], "a.dat", "i0.raw", 1, "Tier0"),
        empty.to_doc("jsd/streamA.jsd", "pid00002"),
        fu_input(files[1], "b.dat", "i1.raw,i2.raw", 4, "Tier0"),
        fu_input(files[2], "c.dat", "i3.raw", 1, "Tier0"),
    ];
    let merged = merge_docs(&Legend::fu_output(), &inputs, "run000001_ls0001_streamA_StorageManager.dat").unwrap();
    assert_eq!((merged.definition.as_str(), merged.source.as_str()), ("jsd/streamA.jsd", ""));
    let out = FuOutputDoc::from_doc(&merged).unwrap();
    let all = files.concat();
    assert_eq!(
        out,
        FuOutputDoc {
            processed: 34,
            accepted: 6,
            error_events: 3,
            return_code_mask: 5,
            file_list: "run000001_ls0001_streamA_StorageManager.dat".into(),
            file_size: all.len() as u64,
            input_files: "i0.raw,i1.raw,i2.raw,i3.raw".into(),
            file_adler32: adler32(&all).into(),
            transfer_destination: "Tier0".into(),
            merge_type: "N/A".into(),
            hlt_error_events: 9,
        }
    );

    // Only empty inputs: an empty merged output.
    let merged = merge_docs(&Legend::fu_output(), &[empty.to_doc("d", "s"), empty.to_doc("d", "t")], "x.dat").unwrap();
    let out = FuOutputDoc::from_doc(&merged).unwrap();
    assert_eq!((out.file_list.as_str(), out.file_size, out.file_adler32), ("", 0, -1));
    assert_eq!(out.transfer_destination, "Tier0");
}

#[test]
fn merges_bu_docs() {
    let eor =
        |events, lumis| EorDoc { events, files: 2, lumis, last_lumi: lumis, orbits: None }.to_doc("jsd/EoR.jsd", "bu");
    let merged = merge_docs(&Legend::eor(), &[eor(10, 5), eor(20, 5)], "").unwrap();
    assert_eq!(
        EorDoc::from_doc(&merged).unwrap(),
        EorDoc { events: 30, files: 4, lumis: 5, last_lumi: 5, orbits: None }
    );
    let merged = merge_docs(&Legend::eor(), &[eor(10, 5), eor(20, 6)], "").unwrap();
    assert_eq!(merged.data, ["30", "4", "N/A", "N/A"]);
}

#[test]
fn merge_errors() {
    let legend = Legend::raw_data();
    let raw = |data: &[&str]| doc("d", "s", data.iter().map(|s| s.to_string()).collect());
    let cases = [
        (vec![], "(inputs)", "nothing to merge"),
        (vec![raw(&["1", "2"]), raw(&["1"])], "inputs[1].data", "expected 2 values (NEvents, NBytes), found 1"),
        (vec![raw(&["1", "2"]), raw(&["1", "x"])], "inputs[1].NBytes", r#""x" is not an unsigned integer"#),
        (vec![raw(&["18446744073709551615", "2"]), raw(&["1", "2"])], "inputs[1].NEvents", "sum overflows 64 bits"),
    ];
    for (inputs, field, problem) in cases {
        assert_eq!(
            json_problem(merge_docs(&legend, &inputs, "m")),
            ("merge input", field.to_owned(), problem.to_owned())
        );
    }
    let no_size = Legend { fields: vec![Legend::fu_output().fields[7].clone()] };
    assert_eq!(
        json_problem(merge_docs(&no_size, &[raw(&["1"])], "m")).2,
        "an adler32 field needs a Filesize field in the legend"
    );
}

proptest! {
    #[test]
    fn adler32_combines(a in proptest::collection::vec(any::<u8>(), 0..3000),
                        b in proptest::collection::vec(any::<u8>(), 0..9000)) {
        let whole = [a.as_slice(), b.as_slice()].concat();
        prop_assert_eq!(adler32_combine(adler32(&a), adler32(&b), b.len() as u64), adler32(&whole));
        prop_assert_eq!(adler32(&whole), naive_adler32(&whole));
        prop_assert_eq!(adler32_strip_prefix(adler32(&whole), adler32(&a), b.len() as u64), adler32(&b));
    }

    #[test]
    fn parsers_never_panic(
        s in "\\PC{0,60}",
        t in r#"\{("(data|legend)":(\[(("[0-9a-z-]{0,4}"|[0-9.-]{1,4}|null|\{\}),?){0,12}\]?|"x"|1))?,?("definition":"d")?,?("source":"s")?\}?"#,
    ) {
        for s in [&s, &t] {
            let _ = Legend::parse(s);
            let _ = JsonDoc::parse("test", s);
            let _ = IndexDoc::parse(s);
            let _ = EolsDoc::parse(s);
            let _ = EorDoc::parse(s);
            let _ = FuOutputDoc::parse(s);
        }
    }

    #[test]
    fn merge_never_panics(data in proptest::collection::vec(
        proptest::collection::vec("-1|0|[0-9]{1,20}|N/A|[a-z.]{0,5}", 10..=12), 0..5)) {
        let inputs: Vec<JsonDoc> = data.into_iter().map(|data| doc("d", "s", data)).collect();
        let _ = merge_docs(&Legend::fu_output(), &inputs, "m.dat");
    }
}
