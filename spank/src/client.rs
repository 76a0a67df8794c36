//! The plugin in srun, sbatch and salloc: `init` registers
//! `--desi-gpu-map` and reads the plugstack arguments, `init_post_opt`
//! checks the value before anything is allocated, and `help` prints the
//! usage. Here a hook's error is the right way to stop the user.

use crate::context::{is_client, stand_aside};
use crate::{copies, node, DesiGpuMap, HookResult};
use desi_gpu_map_core::settings::client_args::Client;
use desi_gpu_map_core::settings::option::{
    check_help_source, option_form, parse_option, usage, OptionRequest, ENV_FORM, OPTION,
};
use desi_gpu_map_core::settings::site::{check_request, parse_args};
use desi_gpu_map_core::Error;
use slurm_spank::{Context, SpankHandle, SpankOption};
use std::io::Write;

/// `init`, in every context: the first line registers the option (unless
/// a copy elsewhere owns it), every line's arguments are read.
pub(crate) fn init(plugin: &mut DesiGpuMap, spank: &mut SpankHandle) -> HookResult {
    let config = node::plugin_args(spank).and_then(|args| parse_args(&args));
    if !plugin.lines.is_empty() {
        return plugin.lines.read_another(spank, config);
    }
    if let Some((first, this)) = copies::first_elsewhere() {
        plugin.aside = true;
        stand_aside(
            spank,
            &format!(
                "{this} stands aside: plugstack.conf loads the plugin from {first} \
                 first, and that copy owns --{OPTION}"
            ),
        );
        return Ok(());
    }
    let registered = spank
        .register_option(SpankOption::new(OPTION).takes_value(&option_form()).usage(
        "Bind each task to its share of its node's GPUs before it starts (see --desi-gpu-map=help)",
    ));
    if is_client(spank) {
        registered.map_err(|e| Error::CannotRegister {
            option: OPTION.to_string(),
            why: e.to_string(),
        })?;
    } else if let Err(e) = &registered {
        log::error!("cannot register --{OPTION}: {e}");
    }
    plugin.lines.read(spank, config)
}

/// `init_post_opt`: the line that registered the option takes its value;
/// in the clients, `help` prints the usage, and the acting line checks the
/// value against its arguments.
pub(crate) fn init_post_opt(
    plugin: &mut DesiGpuMap,
    spank: &mut SpankHandle,
    line: usize,
) -> HookResult {
    // Slurm hands the value only to the line that registered it.
    if line == 0 {
        let request = node::option_value(spank, OPTION)
            .map(|v| parse_option(&v))
            .transpose();
        if is_client(spank) {
            if let Ok(Some(OptionRequest::Help)) = request {
                help(spank)?;
            }
        }
        plugin.request = request.transpose();
    }
    if line != plugin.lines.acting() || !is_client(spank) {
        return Ok(());
    }
    match (&plugin.request, plugin.lines.config()) {
        (Some(Err(e)), _) => Err(e.clone().into()),
        (Some(Ok(request)), Some(Ok(config))) => Ok(check_request(request, config)?),
        _ => Ok(()),
    }
}

/// `--desi-gpu-map=help` in srun, sbatch or salloc: like srun's own
/// `--gpu-bind=help`, the usage, then exit 0.
fn help(spank: &SpankHandle) -> HookResult {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let env_form = std::env::var(ENV_FORM).ok();
    let client = match spank.context() {
        Ok(Context::Local) => Client::Srun,
        _ => Client::Allocator,
    };
    check_help_source(env_form.as_deref(), &args, client)?;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(usage().as_bytes()).and_then(|()| out.flush());
    std::process::exit(0);
}
