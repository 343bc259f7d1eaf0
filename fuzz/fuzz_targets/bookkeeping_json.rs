//! Bookkeeping JSON: the input, as UTF-8 (lossy), through `JsonDoc::parse`, `Legend::parse`, the
//! typed documents' `parse`, and `merge_docs` of what parsed, with the FU output legend and with
//! the parsed legend. Whatever parses must survive a write and a parse unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_formats::bookkeeping::{EolsDoc, EorDoc, FuOutputDoc, IndexDoc, JsonDoc, Legend, MergeOp, merge_docs};

const MERGED: &str = "run000001_ls0001_streamA_merger.dat";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();
    let fu_legend = Legend::fu_output();

    let doc = JsonDoc::parse("fuzz JSON", text).ok();
    if let Some(doc) = &doc {
        let back = JsonDoc::parse("fuzz JSON", &doc.to_json()).expect("a written document parses");
        assert_eq!(&back, doc);
        merge_checked(&fu_legend, &[doc.clone()]);
        merge_checked(&fu_legend, &[doc.clone(), doc.clone()]);
    }

    let legend = Legend::parse(text).ok();
    if let Some(legend) = &legend {
        let back = Legend::parse(&legend.to_json()).expect("a written legend parses");
        assert_eq!(&back, legend);
        for (i, field) in legend.fields.iter().enumerate() {
            assert_eq!(legend.position(&field.name), Some(i), "legend names are unique");
        }
        if let Some(doc) = &doc {
            merge_checked(legend, &[doc.clone(), doc.clone()]);
        }
    }

    if let Ok(d) = IndexDoc::parse(text) {
        assert_eq!(IndexDoc::from_doc(&d.to_doc("jsd/rawData.jsd", "fuzz")).unwrap(), d);
        let doc = doc.as_ref().expect("a typed document is a document");
        assert_eq!(IndexDoc::from_doc(doc).unwrap(), d);
        merge_checked(&Legend::raw_data(), &[d.to_doc("jsd/rawData.jsd", "a"), d.to_doc("jsd/rawData.jsd", "b")]);
    }
    if let Ok(d) = EolsDoc::parse(text) {
        assert_eq!(EolsDoc::from_doc(&d.to_doc("jsd/EoLS.jsd", "fuzz")).unwrap(), d);
        let _ = d.is_complete();
        merge_checked(&Legend::eols(), &[d.to_doc("jsd/EoLS.jsd", "a"), d.to_doc("jsd/EoLS.jsd", "b")]);
    }
    if let Ok(d) = EorDoc::parse(text) {
        assert_eq!(EorDoc::from_doc(&d.to_doc("jsd/EoR.jsd", "fuzz")).unwrap(), d);
        merge_checked(&Legend::eor(), &[d.to_doc("jsd/EoR.jsd", "a"), d.to_doc("jsd/EoR.jsd", "b")]);
    }
    if let Ok(d) = FuOutputDoc::parse(text) {
        let written = d.to_doc("jsd/output.jsd", "fuzz");
        assert_eq!(FuOutputDoc::from_doc(&written).unwrap(), d);
        assert!(d.file_adler32 == -1 || (0..=i64::from(u32::MAX)).contains(&d.file_adler32));
        // Merging FU outputs gives an FU output, unless a sum overflows.
        for inputs in [vec![written.clone()], vec![written.clone(), written.clone()]] {
            if let Some(merged) = merge_checked(&fu_legend, &inputs) {
                let m = FuOutputDoc::from_doc(&merged).expect("merged FU outputs are an FU output");
                assert_eq!(m.transfer_destination, d.transfer_destination);
                assert_eq!(m.merge_type, d.merge_type);
                assert_eq!(m.return_code_mask, d.return_code_mask);
                if inputs.len() == 1 {
                    assert_eq!(m.processed, d.processed);
                    assert_eq!(m.file_size, d.file_size);
                }
            }
        }
    }
});

/// Merges `inputs` with `legend`; when it succeeds, checks the result's shape and the fields whose
/// value follows from the inputs alone.
fn merge_checked(legend: &Legend, inputs: &[JsonDoc]) -> Option<JsonDoc> {
    let merged = match merge_docs(legend, inputs, MERGED) {
        Ok(merged) => merged,
        Err(e) => {
            let _ = e.to_string();
            return None;
        }
    };
    assert_eq!(merged.data.len(), legend.fields.len());
    assert_eq!(merged.definition, inputs[0].definition);
    assert!(merged.source.is_empty());
    for (k, field) in legend.fields.iter().enumerate() {
        let value = merged.data[k].as_str();
        let first = inputs[0].data[k].as_str();
        match field.operation {
            MergeOp::Same => {
                let same = inputs.iter().all(|d| d.data[k] == first);
                assert_eq!(value, if same { first } else { "N/A" });
            }
            MergeOp::Merge => assert!(value.is_empty() || value == MERGED),
            MergeOp::Sum | MergeOp::BinaryOr => {
                assert!(value.parse::<u64>().is_ok(), "{} merged to {value:?}", field.name);
            }
            MergeOp::Adler32 => {
                let v: i64 = value.parse().expect("a merged checksum is a number");
                assert!(v == -1 || (0..=i64::from(u32::MAX)).contains(&v));
            }
            MergeOp::Cat => {}
        }
    }
    // A merged document is a document.
    let back = JsonDoc::parse("merged JSON", &merged.to_json()).expect("a merged document parses");
    assert_eq!(back, merged);
    Some(merged)
}
