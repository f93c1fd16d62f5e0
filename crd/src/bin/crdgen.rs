//! Prints the NetworkEndpoint CRD as YAML; `make crd` writes it to `deploy/crd.yaml`.
fn main() {
    match netendpoint_crd::crd_yaml() {
        Ok(yaml) => print!("{yaml}"),
        Err(e) => {
            eprintln!("crdgen: {e}");
            std::process::exit(1);
        }
    }
}
