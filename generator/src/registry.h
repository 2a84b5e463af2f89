// The text of registry.cpp (everything core/include/ejk/core/registry_data.h declares), and of
// a program's registration.cpp (its own CPU variants, registered through ejk/ejk.h).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace ejk::gen {

struct EmbeddedText {
  std::string path;  // as the runtime looks it up: "specs/x.yaml", "templates/x.tmpl", "ejk/..."
  std::string text;
};

struct CudaImage {
  std::string key, symbol;
  std::string bytes;  // the cubin
};

struct RegistryContent {
  std::string version;
  std::vector<std::string> spec_names;  // for the banner
  std::vector<EmbeddedText> specs, templates, kernel_headers;
  std::vector<std::pair<std::string, std::string>> cpu;  // (key, symbol), sorted by key
  std::vector<CudaImage> cuda;                           // sorted by key
};

std::string render_registry(const RegistryContent& content);

// A program's registration of the CPU variants it compiles itself.
struct UserRegistration {
  std::string version;
  std::vector<std::string> spec_names;                   // for the banner
  std::string kernel_abi;                                // kernel_abi_fingerprint() of the inputs
  std::vector<std::pair<std::string, std::string>> cpu;  // (key, symbol), sorted by key
};

std::string render_user_registration(const UserRegistration& content);

}  // namespace ejk::gen
