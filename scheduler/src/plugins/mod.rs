//! Volcano-compatible plugins, registered in one place: [`build`] maps a configured name to
//! a plugin. Each plugin lives in its own file and implements only the hooks it decides.

use crate::framework::Plugin;
use crate::framework::conf::Arguments;

pub mod binpack;
pub mod conformance;
pub mod drf;
pub mod gang;
pub mod nodeorder;
pub mod overcommit;
pub mod predicates;
pub mod priority;
pub mod proportion;

/// The plugin registered under `name`, configured with `arguments`; `None` for an unknown
/// name (the configuration validator has already warned about it).
pub fn build(name: &str, arguments: &Arguments) -> Option<Box<dyn Plugin>> {
    Some(match name {
        "priority" => Box::new(priority::PriorityPlugin),
        "gang" => Box::new(gang::GangPlugin),
        "conformance" => Box::new(conformance::ConformancePlugin),
        "drf" => Box::new(drf::DrfPlugin::default()),
        "predicates" => Box::new(predicates::PredicatesPlugin),
        "proportion" => Box::new(proportion::ProportionPlugin::default()),
        "nodeorder" => Box::new(nodeorder::NodeOrderPlugin::new(arguments)),
        "binpack" => Box::new(binpack::BinpackPlugin::new(arguments)),
        "overcommit" => Box::new(overcommit::OvercommitPlugin::new(arguments)),
        _ => return None,
    })
}
