//! The testbed (etcd + kube-apiserver + kwok) through `deploy/testbed/testbed`: used as it
//! is when one is up, else brought up for the run and down after it. Its directory and
//! ports come from the same PHALANX_TESTBED_* variables the script reads.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

/// A testbed the run uses; `owned` ones are brought down on drop.
#[derive(Debug)]
pub struct Testbed {
    script: PathBuf,
    pub kubeconfig: PathBuf,
    owned: bool,
}

fn run(script: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(script)
        .args(args)
        .output()
        .map_err(|e| anyhow::anyhow!("running {} {}: {e}", script.display(), args.join(" ")))?;
    anyhow::ensure!(
        out.status.success(),
        "{} {} failed: {}",
        script.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The path of a tool `testbed build` made (`testbed tool-path NAME`).
pub fn tool_path(script: &Path, name: &str) -> anyhow::Result<String> {
    run(script, &["tool-path", name])
}

impl Testbed {
    /// Uses the testbed that is up, or brings one up with `nodes` nodes in `zones` zones.
    pub fn ensure(script: &Path, nodes: u32, zones: u32) -> anyhow::Result<Self> {
        let up = Command::new(script)
            .arg("status")
            .output()
            .is_ok_and(|o| o.status.success());
        if !up {
            eprintln!("chaos: bringing the testbed up ({nodes} nodes, {zones} zones)");
            run(script, &["build"])?;
            run(
                script,
                &[
                    "up",
                    "--nodes",
                    &nodes.to_string(),
                    "--zones",
                    &zones.to_string(),
                ],
            )?;
        }
        let kubeconfig = PathBuf::from(run(script, &["kubeconfig-path"])?);
        Ok(Self {
            script: script.to_path_buf(),
            kubeconfig,
            owned: !up,
        })
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.owned
            && let Err(e) = run(&self.script, &["down"])
        {
            eprintln!("chaos: bringing the testbed down: {e}");
        }
    }
}

/// Creates the PodGroup and Queue CRDs from `dir` (present already: fine) and waits until
/// the PodGroup API answers.
pub async fn install_crds(client: &kube::Client, dir: &Path) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for f in ["podgroups", "queues"] {
        let path = dir.join(format!("{f}.yaml"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => anyhow::bail!("installing {}: {e}", path.display()),
        }
        let name = format!("{f}.scheduling.volcano.sh");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let crd = api.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "CRD {name} not Established after 30 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    Ok(())
}
