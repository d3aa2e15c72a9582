//! Generates the Rust code for `warden/v1/*.proto` with the protoc that
//! `protoc-bin-vendored` ships, so the build needs no system protoc.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        PathBuf::from("warden/v1/authority.proto"),
        PathBuf::from("warden/v1/admin.proto"),
        PathBuf::from("warden/v1/approvals.proto"),
    ];
    for proto in &protos {
        println!("cargo:rerun-if-changed={}", proto.display());
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let well_known = protoc_bin_vendored::include_path()?;
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("warden_descriptor.bin"))
        .compile_with_config(config, &protos, &[PathBuf::from("."), well_known])?;
    Ok(())
}
