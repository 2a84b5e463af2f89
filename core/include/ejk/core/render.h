// Template rendering: {{name}} placeholders, nothing else. An unknown placeholder or an
// unterminated one is an error naming the template and the line, so a template typo fails
// the build, never a user's JIT.
#pragma once
#include <map>
#include <string>
#include <string_view>

namespace ejk {

std::string render_template(std::string_view text, const std::map<std::string, std::string>& vars,
                            std::string_view template_name);

}  // namespace ejk
