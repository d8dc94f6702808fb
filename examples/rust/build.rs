//! Find libcosyvoice with the pkg-config binary (no crates): `pkg-config --libs cosyvoice`
//! gives -L and -l flags that become cargo link directives. PKG_CONFIG names another binary;
//! PKG_CONFIG_PATH points at a prefix's lib/pkgconfig as for C programs. At run time the loader
//! must find libcosyvoice.so.0 (an installed prefix in its path, or LD_LIBRARY_PATH).
use std::env;
use std::process::Command;

fn main() {
    for v in ["PKG_CONFIG", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "PKG_CONFIG_SYSROOT_DIR"] {
        println!("cargo:rerun-if-env-changed={}", v);
    }
    let exe = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let out = Command::new(&exe).args(["--libs", "cosyvoice"]).output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "`{} --libs cosyvoice` failed: {}\nInstall libcosyvoice (make install) and set \
             PKG_CONFIG_PATH to PREFIX/lib/pkgconfig.",
            exe,
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("cannot run {}: {} (install pkg-config)", exe, e),
    };
    let flags = String::from_utf8(out.stdout).expect("pkg-config output is not UTF-8");
    let mut linked = false;
    for f in flags.split_whitespace() {
        if let Some(dir) = f.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={}", dir);
            println!("cargo:libdir={}", dir); // DEP_COSYVOICE_LIBDIR for dependent crates
        } else if let Some(lib) = f.strip_prefix("-l") {
            println!("cargo:rustc-link-lib={}", lib);
            linked |= lib == "cosyvoice";
        }
    }
    if !linked {
        panic!("`{} --libs cosyvoice` did not name -lcosyvoice: {}", exe, flags.trim());
    }
}
