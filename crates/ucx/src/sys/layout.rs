//! The declarations of `sys` against UCX's own headers: a small C program, compiled here with the
//! system's C compiler against `<ucp/api/ucp.h>`, prints the size and alignment of every struct
//! declared, the offset and size of every field, and the value of every constant; each must equal
//! what Rust has. A mismatch names the struct and field (or constant) and both values.

use super::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::offset_of;
use std::process::Command;

#[path = "../../../cli/tests/common/require.rs"]
mod require;

/// What Rust says of one declaration, keyed as the C program prints it.
type Facts = BTreeMap<String, i128>;

/// The size of a field, from a projection (no value of the struct is needed).
fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// Every struct's size and alignment and every field's offset and size, Rust's side, and the
/// C statements that print the same keys.
macro_rules! structs {
    ($facts:ident, $c:ident; $($ty:ident { $($field:ident),* $(,)? })*) => {$(
        $facts.insert(format!("size {}", stringify!($ty)), size_of::<$ty>() as i128);
        $facts.insert(format!("align {}", stringify!($ty)), align_of::<$ty>() as i128);
        writeln!($c, "printf(\"size {0} %zu\\n\", sizeof({0}));", stringify!($ty)).unwrap();
        writeln!($c, "printf(\"align {0} %zu\\n\", _Alignof({0}));", stringify!($ty)).unwrap();
        $(
            $facts.insert(
                format!("offset {}.{}", stringify!($ty), stringify!($field)),
                offset_of!($ty, $field) as i128,
            );
            $facts.insert(
                format!("fieldsize {}.{}", stringify!($ty), stringify!($field)),
                field_size(|s: &$ty| &s.$field) as i128,
            );
            writeln!(
                $c,
                "printf(\"offset {0}.{1} %zu\\n\", offsetof({0}, {1}));\n\
                 printf(\"fieldsize {0}.{1} %zu\\n\", sizeof((({0} *)0)->{1}));",
                stringify!($ty),
                stringify!($field)
            )
            .unwrap();
        )*
    )*};
}

/// Every constant's value, Rust's side, and the C statement that prints it.
macro_rules! constants {
    ($facts:ident, $c:ident; $($name:ident),* $(,)?) => {$(
        $facts.insert(format!("const {}", stringify!($name)), $name as i128);
        writeln!($c, "printf(\"const {0} %lld\\n\", (long long)({0}));", stringify!($name)).unwrap();
    )*};
}

/// Rust's facts and the C program that prints C's.
fn rust_facts_and_c_program() -> (Facts, String) {
    let mut facts = Facts::new();
    let mut c = String::from("#include <ucp/api/ucp.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n");
    structs!(facts, c;
        ucp_params_t {
            field_mask, features, request_size, request_init, request_cleanup, tag_sender_mask,
            mt_workers_shared, estimated_num_eps, estimated_num_ppn, name,
        }
        ucs_cpu_set_t { ucs_bits }
        ucp_worker_params_t {
            field_mask, thread_mode, cpu_mask, events, user_data, event_fd, flags, name, am_alignment,
            client_id,
        }
        ucp_err_handler_t { cb, arg }
        ucs_sock_addr_t { addr, addrlen }
        ucp_ep_params_t {
            field_mask, address, err_mode, err_handler, user_data, flags, sockaddr, conn_request, name,
            local_sockaddr,
        }
        ucp_request_param_t {
            op_attr_mask, flags, request, cb, datatype, user_data, reply_buffer, memory_type, recv_info,
            memh,
        }
        ucp_dt_iov_t { buffer, length }
        ucp_am_handler_param_t { field_mask, id, flags, cb, arg }
        ucp_am_recv_param_t { recv_attr, reply_ep }
        ucp_mem_map_params_t { field_mask, address, length, flags, prot, memory_type }
    );
    // The anonymous unions of ucp_request_param_t, by their members' sizes.
    for (key, rust, c_expr) in [
        ("union cb", size_of::<ucp_request_param_cb>(), "sizeof(((ucp_request_param_t *)0)->cb)"),
        ("union cb.send", size_of::<ucp_send_nbx_callback_t>(), "sizeof(((ucp_request_param_t *)0)->cb.send)"),
        (
            "union cb.recv_am",
            size_of::<ucp_am_recv_data_nbx_callback_t>(),
            "sizeof(((ucp_request_param_t *)0)->cb.recv_am)",
        ),
        ("union recv_info", size_of::<ucp_request_param_recv_info>(), "sizeof(((ucp_request_param_t *)0)->recv_info)"),
    ] {
        facts.insert(key.to_owned(), rust as i128);
        writeln!(c, "printf(\"{key} %zu\\n\", {c_expr});").unwrap();
    }
    // The scalar types.
    for (key, rust, c_type) in [
        ("scalar ucs_status_t", size_of::<ucs_status_t>(), "ucs_status_t"),
        ("scalar ucp_datatype_t", size_of::<ucp_datatype_t>(), "ucp_datatype_t"),
        ("scalar ucs_thread_mode_t", size_of::<c_enum>(), "ucs_thread_mode_t"),
        ("scalar ucp_err_handling_mode_t", size_of::<c_enum>(), "ucp_err_handling_mode_t"),
        ("scalar ucs_memory_type_t", size_of::<c_enum>(), "ucs_memory_type_t"),
    ] {
        facts.insert(key.to_owned(), rust as i128);
        writeln!(c, "printf(\"{key} %zu\\n\", sizeof({c_type}));").unwrap();
    }
    constants!(facts, c;
        UCS_OK, UCS_INPROGRESS, UCS_ERR_INVALID_PARAM, UCS_ERR_UNREACHABLE, UCS_ERR_NO_DEVICE,
        UCS_ERR_BUSY, UCS_ERR_CANCELED, UCS_ERR_TIMED_OUT, UCS_ERR_CONNECTION_RESET,
        UCS_ERR_ENDPOINT_TIMEOUT, UCS_ERR_LAST,
        UCP_PARAM_FIELD_FEATURES, UCP_FEATURE_WAKEUP, UCP_FEATURE_AM,
        UCP_WORKER_PARAM_FIELD_THREAD_MODE, UCP_WORKER_PARAM_FIELD_EVENTS, UCS_THREAD_MODE_SINGLE,
        UCP_WAKEUP_TX, UCP_WAKEUP_RX,
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE, UCP_EP_PARAM_FIELD_ERR_HANDLER,
        UCP_ERR_HANDLING_MODE_NONE, UCP_ERR_HANDLING_MODE_PEER, UCP_EP_CLOSE_FLAG_FORCE,
        UCP_OP_ATTR_FIELD_CALLBACK, UCP_OP_ATTR_FIELD_USER_DATA, UCP_OP_ATTR_FIELD_DATATYPE,
        UCP_OP_ATTR_FIELD_FLAGS,
        UCP_DATATYPE_CONTIG, UCP_DATATYPE_IOV, UCP_DATATYPE_SHIFT,
        UCP_AM_RECV_ATTR_FLAG_RNDV,
        UCP_AM_HANDLER_PARAM_FIELD_ID, UCP_AM_HANDLER_PARAM_FIELD_FLAGS, UCP_AM_HANDLER_PARAM_FIELD_CB,
        UCP_AM_HANDLER_PARAM_FIELD_ARG, UCP_AM_FLAG_WHOLE_MSG,
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS, UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        UCP_API_MAJOR, UCP_API_MINOR,
    );
    // A macro of the header against its Rust function.
    facts.insert("const ucp_dt_make_contig(1)".to_owned(), ucp_dt_make_contig(1) as i128);
    c.push_str("printf(\"const ucp_dt_make_contig(1) %lld\\n\", (long long)ucp_dt_make_contig(1));\n");
    c.push_str("return 0;\n}\n");
    (facts, c)
}

/// The C compiler's answer: the program compiled and run; `Err` says why it could not be.
fn c_facts(program: &str) -> Result<Facts, String> {
    let dir = std::env::temp_dir().join(format!("tessera-ucx-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let (source, binary) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&source, program).map_err(|e| format!("writing {}: {e}", source.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let mut compile = Command::new(&cc);
    // Where pkg-config knows UCX's headers (nothing to add for Debian's).
    if let Ok(out) = Command::new("pkg-config").args(["--cflags", "ucx"]).output()
        && out.status.success()
    {
        compile.args(String::from_utf8_lossy(&out.stdout).split_whitespace());
    }
    let out = compile
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
        .map_err(|e| format!("running the C compiler `{cc}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{cc}` could not compile a program against <ucp/api/ucp.h> (libucx-dev): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let out = Command::new(&binary).output().map_err(|e| format!("running {}: {e}", binary.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).map_err(|e| format!("the program's output: {e}"))?;
    let mut facts = Facts::new();
    for line in text.lines() {
        let (key, value) = line.rsplit_once(' ').ok_or_else(|| format!("an unexpected line {line:?}"))?;
        let value = value.parse().map_err(|e| format!("{line:?}: {e}"))?;
        facts.insert(key.to_owned(), value);
    }
    Ok(facts)
}

#[test]
fn every_declared_struct_field_and_constant_is_as_the_ucx_headers_say() {
    let (rust, program) = rust_facts_and_c_program();
    let c = c_facts(&program);
    let why = c.as_ref().err().cloned().unwrap_or_default();
    if !require::require(&format!("compiling the layout check against UCX's headers: {why}"), c.is_ok()) {
        return;
    }
    let c = c.unwrap();
    let mut wrong = Vec::new();
    for (key, value) in &rust {
        match c.get(key) {
            Some(c_value) if c_value == value => {}
            Some(c_value) => wrong.push(format!("{key}: Rust {value}, C {c_value}")),
            None => wrong.push(format!("{key}: the C program did not print it")),
        }
    }
    assert!(wrong.is_empty(), "sys declarations that differ from <ucp/api/ucp.h>:\n{}", wrong.join("\n"));
    assert_eq!(rust.len(), c.len(), "the C program printed keys Rust does not have");
}
