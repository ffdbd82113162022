#pragma once
// The expert-major interface under its earlier name: switchyard/expert_major.hpp.
#include "switchyard/expert_major.hpp"
