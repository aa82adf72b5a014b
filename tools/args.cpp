#include "args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace hfa::tool {

Args::Args(std::vector<std::string> tokens) {
  for (std::string& text : tokens) tokens_.push_back({std::move(text)});
}

bool Args::wants_help() const {
  for (const Token& t : tokens_)
    if (t.text == "--help" || t.text == "-h") return true;
  return false;
}

bool Args::flag(const std::string& name) {
  const std::string dashed = "--" + name;
  bool present = false;
  for (Token& t : tokens_) {
    if (t.text == dashed) {
      t.used = true;
      present = true;
    } else if (t.text.rfind(dashed + "=", 0) == 0) {
      throw UsageError(dashed + ": takes no value");
    }
  }
  return present;
}

std::optional<std::string> Args::value(const std::string& name) {
  const std::string dashed = "--" + name;
  std::optional<std::string> found;
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    Token& t = tokens_[i];
    if (t.used) continue;
    if (t.text == dashed) {
      if (i + 1 >= tokens_.size() || tokens_[i + 1].text.rfind("--", 0) == 0)
        throw UsageError(dashed + ": expects a value");
      t.used = tokens_[i + 1].used = true;
      found = tokens_[i + 1].text;
      ++i;
    } else if (t.text.rfind(dashed + "=", 0) == 0) {
      t.used = true;
      found = t.text.substr(dashed.size() + 1);
    }
  }
  return found;
}

int64_t parse_integer(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(flag + ": expected an integer, got '" + text + "'");
  if (parsed < min || parsed > max)
    throw UsageError(flag + ": " + text + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  return parsed;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  const auto text = value(name);
  return text ? parse_integer("--" + name, *text, min, max) : fallback;
}

double parse_number(const std::string& flag, const std::string& text, double min, double max) {
  char* end = nullptr;
  const double parsed = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(parsed))
    throw UsageError(flag + ": expected a number, got '" + text + "'");
  if (parsed < min || parsed > max) {
    std::ostringstream message;
    message << flag << ": " << text << " is out of range [" << min << ", " << max << "]";
    throw UsageError(message.str());
  }
  return parsed;
}

double Args::number(const std::string& name, double fallback, double min, double max) {
  const auto text = value(name);
  return text ? parse_number("--" + name, *text, min, max) : fallback;
}

std::string Args::choice(const std::string& name, const std::string& fallback,
                         std::initializer_list<const char*> allowed) {
  const auto text = value(name);
  if (!text) return fallback;
  std::string list;
  for (const char* option : allowed) {
    if (*text == option) return *text;
    list += (list.empty() ? "" : ", ") + std::string(option);
  }
  throw UsageError("--" + name + ": expected one of " + list + ", got '" + *text + "'");
}

std::vector<int64_t> Args::integers(const std::string& name, std::vector<int64_t> fallback,
                                    int64_t min, int64_t max) {
  const auto text = value(name);
  if (!text) return fallback;
  std::vector<int64_t> parsed;
  std::stringstream stream(*text);
  std::string item;
  while (std::getline(stream, item, ',')) parsed.push_back(parse_integer("--" + name, item, min, max));
  if (parsed.empty() || text->back() == ',')  // getline drops a trailing empty item
    throw UsageError("--" + name + ": expected a comma-separated list of integers, got '" + *text + "'");
  return parsed;
}

void Args::finish() const {
  for (const Token& t : tokens_) {
    if (t.used) continue;
    if (t.text.rfind("--", 0) == 0) throw UsageError("unknown flag " + t.text.substr(0, t.text.find('=')));
    throw UsageError("unexpected argument '" + t.text + "'");
  }
}

}  // namespace hfa::tool
