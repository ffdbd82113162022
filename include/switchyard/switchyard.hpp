#pragma once
// Umbrella header.
#include "switchyard/buffer.hpp"
#include "switchyard/config.hpp"
#include "switchyard/dtype.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/group.hpp"
#include "switchyard/moe.hpp"
#include "switchyard/reference.hpp"
#include "switchyard/tensor.hpp"
#include "switchyard/topology.hpp"
#include "switchyard/version.hpp"
