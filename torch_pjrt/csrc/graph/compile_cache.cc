#include "graph/compile_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "graph/metrics.h"

namespace torch_pjrt::graph {

namespace {

constexpr char kMagic[8] = {'T', 'P', 'J', 'R', 'T', 'X', '0', '1'};

uint64_t Fnv1a(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string DefaultDirectory() {
  if (const char* off = std::getenv("TORCH_PJRT_DISK_CACHE")) {
    if (std::string(off) == "0" || std::string(off) == "false") return "";
  }
  if (const char* dir = std::getenv("TORCH_PJRT_CACHE_DIR")) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME")) return std::string(xdg) + "/torch_pjrt";
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.cache/torch_pjrt";
  return "";
}

}  // namespace

bool EnsureDirectory(const std::string& path) {
  std::string partial;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') partial = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    partial += part + "/";
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

namespace {

void PutU64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
bool GetU64(const std::string& s, size_t* pos, uint64_t* v) {
  if (*pos + 8 > s.size()) return false;
  std::memcpy(v, s.data() + *pos, 8);
  *pos += 8;
  return true;
}

std::function<void(const std::string&)>& WarningHandler() {
  static auto* h = new std::function<void(const std::string&)>(
      [](const std::string& m) { std::cerr << "torch_pjrt warning: " << m << std::endl; });
  return *h;
}

}  // namespace

void SetWarningHandler(std::function<void(const std::string&)> handler) {
  WarningHandler() = std::move(handler);
}

void Warn(const std::string& message) { WarningHandler()(message); }

CompileCache& CompileCache::Get() {
  static CompileCache* c = new CompileCache();
  return *c;
}

CompileCache::CompileCache() : directory_(DefaultDirectory()) {
  const char* cap = std::getenv("TORCH_PJRT_CACHE_SIZE");
  capacity_ = cap ? std::max<long long>(1, std::atoll(cap)) : 1024;
}

void CompileCache::set_capacity(size_t n) {
  capacity_ = n == 0 ? 1 : n;
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
}

std::shared_ptr<CompiledGraph> CompileCache::Find(uint64_t key) {
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.position);
  return it->second.entry;
}

void CompileCache::Insert(uint64_t key, std::shared_ptr<CompiledGraph> entry) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    it->second.entry = std::move(entry);
    lru_.splice(lru_.begin(), lru_, it->second.position);
    return;
  }
  lru_.push_front(key);
  map_[key] = Slot{std::move(entry), lru_.begin()};
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
}

void CompileCache::Clear() {
  map_.clear();
  lru_.clear();
}

std::shared_ptr<CompiledGraph> CompileCache::Nearest(const std::string& summary, uint64_t* key) const {
  std::shared_ptr<CompiledGraph> best;
  size_t best_len = 0;
  for (const auto& kv : map_) {
    const std::string& other = kv.second.entry->summary;
    size_t n = 0;
    while (n < other.size() && n < summary.size() && other[n] == summary[n]) ++n;
    if (!best || n > best_len) {
      best = kv.second.entry;
      best_len = n;
      *key = kv.first;
    }
  }
  return best;
}

std::string CompileCache::PathFor(const std::string& directory, uint64_t key, const std::string& fingerprint) {
  return directory + "/" + Hex(key) + "-" + Hex(Fnv1a(fingerprint)) + ".pjrtx";
}

std::shared_ptr<runtime::Executable> CompileCache::LoadFromDisk(
    const std::string& directory, uint64_t key, const std::string& fingerprint, const std::shared_ptr<runtime::Client>& client) {
  if (directory.empty()) return nullptr;
  std::string path = PathFor(directory, key, fingerprint);
  std::ifstream f(path, std::ios::binary);
  if (!f) return nullptr;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string data = ss.str();
  auto corrupt = [&](const std::string& why) -> std::shared_ptr<runtime::Executable> {
    Metrics::Increment(Counter::kCacheCorruptEntries);
    Warn("compile cache entry " + path + " is unusable (" + why + "); recompiling it");
    std::remove(path.c_str());
    return nullptr;
  };
  size_t pos = 0;
  if (data.size() < sizeof(kMagic) || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("bad header");
  }
  pos = sizeof(kMagic);
  uint64_t fp_len, stored_key, payload_len, checksum;
  if (!GetU64(data, &pos, &fp_len) || pos + fp_len > data.size()) return corrupt("truncated");
  std::string stored_fp = data.substr(pos, fp_len);
  pos += fp_len;
  if (!GetU64(data, &pos, &stored_key) || !GetU64(data, &pos, &payload_len) ||
      !GetU64(data, &pos, &checksum)) {
    return corrupt("truncated");
  }
  if (stored_fp != fingerprint || stored_key != key) return corrupt("written for another graph or plugin");
  if (pos + payload_len != data.size()) return corrupt("truncated");
  std::string payload = data.substr(pos);
  if (Fnv1a(payload) != checksum) return corrupt("checksum mismatch");
  try {
    return runtime::Executable::Deserialize(client, payload);
  } catch (const std::exception& e) {
    return corrupt(std::string("the plugin could not load it: ") + e.what());
  }
}

void CompileCache::StoreToDisk(const std::string& directory, uint64_t key, const std::string& fingerprint,
                               const runtime::Executable& exe, std::string payload) {
  if (directory.empty()) return;
  try {
    if (payload.empty()) payload = exe.Serialize();
  } catch (const std::exception& e) {
    Warn(std::string("could not serialize an executable for the disk cache: ") + e.what());
    return;
  }
  if (!EnsureDirectory(directory)) {
    Warn("cannot create the compile cache directory " + directory + ": " + std::strerror(errno));
    return;
  }
  std::string data(kMagic, sizeof(kMagic));
  PutU64(data, fingerprint.size());
  data += fingerprint;
  PutU64(data, key);
  PutU64(data, payload.size());
  PutU64(data, Fnv1a(payload));
  data += payload;
  std::string path = PathFor(directory, key, fingerprint);
  // Written under a unique name and renamed, so readers never see half a file.
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) {
      Warn("cannot write the compile cache entry " + tmp);
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace torch_pjrt::graph
