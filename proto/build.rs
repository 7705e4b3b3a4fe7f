//! Compiles the .proto files with protox (pure Rust): a fresh machine needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/raft.proto",
        "proto/ledger.proto",
        "proto/coord.proto",
        "proto/admin.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
