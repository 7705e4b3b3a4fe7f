//! Volcano-compatible plugins, registered in one place: [`build`] maps a configured name to
//! a plugin. Each plugin lives in its own file and implements only the hooks it decides.

use crate::framework::Plugin;
use crate::framework::conf::PluginOption;

pub mod binpack;
pub mod capacity;
pub mod conformance;
pub mod drf;
pub mod gang;
pub mod nodeorder;
pub mod overcommit;
pub mod predicates;
pub mod priority;
pub mod proportion;

/// The plugin a tier's entry names, configured with its arguments (and, for `capacity`,
/// `enableHierarchy`); `None` for an unknown name (the configuration validator has already
/// warned about it).
pub fn build(option: &PluginOption) -> Option<Box<dyn Plugin>> {
    let arguments = &option.arguments;
    Some(match option.name.as_str() {
        "priority" => Box::new(priority::PriorityPlugin),
        "gang" => Box::new(gang::GangPlugin),
        "conformance" => Box::new(conformance::ConformancePlugin),
        "drf" => Box::new(drf::DrfPlugin::default()),
        "predicates" => Box::new(predicates::PredicatesPlugin),
        "proportion" => Box::new(proportion::ProportionPlugin::default()),
        "capacity" => Box::new(capacity::CapacityPlugin::new(
            option.hooks.hierarchy == Some(true),
        )),
        "nodeorder" => Box::new(nodeorder::NodeOrderPlugin::new(arguments)),
        "binpack" => Box::new(binpack::BinpackPlugin::new(arguments)),
        "overcommit" => Box::new(overcommit::OvercommitPlugin::new(arguments)),
        _ => return None,
    })
}
