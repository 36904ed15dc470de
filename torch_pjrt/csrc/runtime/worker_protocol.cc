#include "runtime/worker_protocol.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace torch_pjrt::runtime::worker {

namespace {

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void AppendFrame(std::string* out, const std::string& frame) {
  uint64_t size = frame.size();
  out->append(reinterpret_cast<const char*>(&size), sizeof(size));  // x86-64 and aarch64: little-endian
  out->append(frame);
}

std::string JoinInts(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out;
}

std::vector<int64_t> SplitInts(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

bool WriteMessage(int fd, const std::vector<std::string>& frames) {
  std::string bytes;
  for (const auto& f : frames) AppendFrame(&bytes, f);
  return WriteAll(fd, bytes.data(), bytes.size());
}

bool ReadMessage(int fd, size_t count, std::vector<std::string>* frames) {
  frames->clear();
  for (size_t i = 0; i < count; ++i) {
    uint64_t size = 0;
    if (!ReadAll(fd, reinterpret_cast<char*>(&size), sizeof(size))) return false;
    std::string frame(size, '\0');
    if (!ReadAll(fd, frame.data(), size)) return false;
    frames->push_back(std::move(frame));
  }
  return true;
}

std::string JoinFrames(const std::vector<std::string>& frames) {
  std::string out;
  for (const auto& f : frames) AppendFrame(&out, f);
  return out;
}

std::vector<std::string> SplitFrames(const std::string& joined) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at + sizeof(uint64_t) <= joined.size()) {
    uint64_t size;
    std::memcpy(&size, joined.data() + at, sizeof(size));
    at += sizeof(size);
    if (size > joined.size() - at) throw std::runtime_error("compile worker: truncated frame");
    out.push_back(joined.substr(at, size));
    at += size;
  }
  return out;
}

std::string EncodeEnvironment(const std::map<std::string, std::string>& environment) {
  std::vector<std::string> frames;
  for (const auto& [name, value] : environment) {
    frames.push_back(name);
    frames.push_back(value);
  }
  return JoinFrames(frames);
}

std::map<std::string, std::string> DecodeEnvironment(const std::string& frame) {
  std::vector<std::string> frames = SplitFrames(frame);
  if (frames.size() % 2 != 0) throw std::runtime_error("compile worker: malformed environment");
  std::map<std::string, std::string> environment;
  for (size_t i = 0; i < frames.size(); i += 2) environment[frames[i]] = frames[i + 1];
  return environment;
}

std::string EncodeOptions(const std::vector<NamedOption>& options) {
  std::vector<std::string> out;
  for (const NamedOption& o : options) {
    std::string value;
    switch (o.kind) {
      case NamedOption::Kind::kString: value = o.string_value; break;
      case NamedOption::Kind::kInt64: value = std::to_string(o.int_value); break;
      case NamedOption::Kind::kInt64List: value = JoinInts(o.int_list); break;
      case NamedOption::Kind::kFloat: {
        std::ostringstream s;
        s.precision(9);
        s << o.float_value;
        value = s.str();
        break;
      }
      case NamedOption::Kind::kBool: value = o.bool_value ? "1" : "0"; break;
    }
    out.push_back(o.name);
    out.push_back(std::to_string(static_cast<int>(o.kind)));
    out.push_back(value);
  }
  return JoinFrames(out);
}

std::vector<NamedOption> DecodeOptions(const std::string& frame) {
  std::vector<std::string> f = SplitFrames(frame);
  std::vector<NamedOption> out;
  for (size_t i = 0; i + 2 < f.size(); i += 3) {
    NamedOption o;
    o.name = f[i];
    o.kind = static_cast<NamedOption::Kind>(std::stoi(f[i + 1]));
    const std::string& v = f[i + 2];
    switch (o.kind) {
      case NamedOption::Kind::kString: o.string_value = v; break;
      case NamedOption::Kind::kInt64: o.int_value = std::stoll(v); break;
      case NamedOption::Kind::kInt64List: o.int_list = SplitInts(v); break;
      case NamedOption::Kind::kFloat: o.float_value = std::stof(v); break;
      case NamedOption::Kind::kBool: o.bool_value = v == "1"; break;
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace torch_pjrt::runtime::worker
