//! `-m NAME` → the file and byte range holding a GGUF. The rule, the same on every platform:
//! 1. `NAME` as a path (relative ones from the current directory) naming a file on disk: a
//!    plain GGUF, or a llamafile holding exactly one `.gguf`;
//! 2. the entry `NAME` (or `/zip/NAME`) of our own ZIP;
//! 3. for a relative `NAME`, the file `NAME` in the directory holding our own executable (a
//!    *side file*: how a llamafile too large to carry its weights, such as a Windows `.exe`
//!    over 4 GiB, finds them; its `.args` names them as in step 2, so the two forms share one
//!    `.args`).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{Bundle, BundleError};

/// The bytes of a GGUF: `len` bytes at `offset` of `path`. `offset` is a multiple of
/// [`super::MIN_DATA_ALIGNMENT`]; it is 0 for a plain GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelLocation {
    pub path: PathBuf,
    pub offset: u64,
    pub len: u64,
}

const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// Resolves a model argument by the module's rule; `own` is our own executable's ZIP, if it
/// has one. Side files are looked for beside the running executable.
pub fn resolve_model(arg: &str, own: Option<&Bundle>) -> Result<ModelLocation, BundleError> {
    let program = match own {
        Some(bundle) => Some(bundle.path().to_path_buf()),
        None => std::env::current_exe().ok(),
    };
    let program_dir = program.as_deref().and_then(Path::parent);
    resolve_model_beside(arg, own, program_dir)
}

/// [`resolve_model`] with side files looked for in `program_dir` (none: not at all).
pub fn resolve_model_beside(
    arg: &str,
    own: Option<&Bundle>,
    program_dir: Option<&Path>,
) -> Result<ModelLocation, BundleError> {
    if !arg.starts_with("/zip/") {
        let path = Path::new(arg);
        if path.is_file() {
            return locate_on_disk(path);
        }
    }
    if let Some(bundle) = own.filter(|b| b.entry(arg).is_some()) {
        return bundle.locate(arg);
    }
    // A name with a root (`/x`, `C:\\x`, `\\x`, `/zip/x`) is never a side file.
    let side_dir = program_dir.filter(|_| !Path::new(arg).has_root());
    if let Some(side) = side_dir.map(|dir| dir.join(arg)).filter(|p| p.is_file()) {
        return locate_on_disk(&side);
    }
    Err(BundleError::ModelNotFound {
        name: arg.to_string(),
        own: own.map(|b| b.path().to_path_buf()),
        beside: side_dir.map(Path::to_path_buf),
    })
}

fn locate_on_disk(path: &Path) -> Result<ModelLocation, BundleError> {
    let io_error = |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io_error)?;
    let len = file.metadata().map_err(io_error)?.len();
    let mut magic = [0u8; 4];
    if len >= 4 {
        file.read_exact(&mut magic).map_err(io_error)?;
    }
    if &magic == GGUF_MAGIC {
        return Ok(ModelLocation {
            path: path.to_path_buf(),
            offset: 0,
            len,
        });
    }
    let Some(bundle) = Bundle::open(path)? else {
        return Err(BundleError::NotAModel {
            path: path.to_path_buf(),
            magic: String::from_utf8_lossy(&magic).into_owned(),
        });
    };
    let ggufs: Vec<_> = bundle.gguf_entries().collect();
    match ggufs.as_slice() {
        [only] => bundle.location_of(only),
        [] => Err(BundleError::NoGgufInside {
            path: path.to_path_buf(),
        }),
        several => Err(BundleError::SeveralGgufInside {
            path: path.to_path_buf(),
            names: several.iter().map(|e| e.name.clone()).collect(),
        }),
    }
}
