// The Python of the stronger CPU peers (PyTorch 2.x, ONNX Runtime, OpenVINO), the venv that
// scripts/peers-setup makes, for `vitpe bench --vs-peers` and `vitpe bench train --vs-peers`:
// where it is, and the usage error that says how to make it, given before any measurement.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

#include "apps/command.h"

namespace vitpe::app {

// The venv when neither --peers-python nor $VITPE_PEERS_VENV says otherwise (scripts/peers-setup's
// default too).
inline constexpr const char* kPeersVenv = "/opt/vitpe-peers";

// Adds --vs-peers and --peers-python to `cmd`; `what` says what the peers measure.
inline void add_peers_options(CLI::App* cmd, bool& vs_peers, std::string& python,
                              const std::string& what) {
  cmd->add_flag("--vs-peers", vs_peers,
                what + " (the venv of scripts/peers-setup) and print the ratios");
  cmd->add_option("--peers-python", python,
                  "The peers' Python (default: $VITPE_PEERS_VENV/bin/python, else " +
                      std::string(kPeersVenv) + "/bin/python)");
}

// The peers' interpreter: `given` (--peers-python), else $VITPE_PEERS_VENV/bin/python, else the
// default venv's. Throws ExitError{2} naming scripts/peers-setup when it is not an executable
// file, so that a run never measures vitpe and then finds it has no peers.
inline std::string require_peers_python(const std::string& given, const std::string& command) {
  std::string python = given;
  if (python.empty()) {
    const char* venv = std::getenv("VITPE_PEERS_VENV");
    python = std::string(venv && *venv ? venv : kPeersVenv) + "/bin/python";
  }
  if (access(python.c_str(), X_OK) != 0) {
    throw ExitError{2, command + " --vs-peers: no peers' Python at " + python +
                           "; run scripts/peers-setup (it makes the venv with PyTorch 2.x, timm, "
                           "ONNX Runtime and OpenVINO; VITPE_PEERS_VENV or --peers-python "
                           "point elsewhere)"};
  }
  return python;
}

// `text` quoted for a POSIX shell: 'text' with each ' as '\''.
inline std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

}  // namespace vitpe::app
