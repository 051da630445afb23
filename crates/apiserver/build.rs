//! Compiles the Kubernetes `generated.proto` files under `proto/` into one descriptor set
//! (`$OUT_DIR/kubernetes.fds`) with rust-protobuf's pure-Rust parser: the server reads and
//! writes protobuf bodies by walking these descriptors.

use std::path::{Path, PathBuf};

use protobuf::Message;

fn protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            protos(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new("proto");
    println!("cargo:rerun-if-changed=proto");
    let mut files = Vec::new();
    protos(root, &mut files)?;
    files.sort();
    let set = protobuf_parse::Parser::new()
        .pure()
        .include(root)
        .inputs(&files)
        .file_descriptor_set()?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("kubernetes.fds");
    std::fs::write(out, set.write_to_bytes()?)?;
    Ok(())
}
