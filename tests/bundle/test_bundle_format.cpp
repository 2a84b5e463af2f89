// The bundle format (runtime/src/bundle/): writer and reader on crafted bytes, and every kind of
// damage the reader must confine: header, manifest record, slot, payload, truncation, a newer
// format version, a payload that is not a zstd frame.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bundle/reader.h"
#include "bundle/writer.h"
#include "ejk/core/error.h"
#include "util/hash.h"

using namespace ejk::bundle;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> binary_of(int n, size_t size) {
  std::vector<uint8_t> b(size);
  for (size_t i = 0; i < size; ++i) b[i] = static_cast<uint8_t>((i * 31 + n * 7) ^ (i >> 5));
  return b;
}

EntryMeta meta_of(int n) {
  const std::string key = fmt::format("flash_fwd.cpu.avx512.f32.d{}.bq64.bk64", 64 + 16 * n);
  return {"cpu", key, "avx512", "x86-64-v4", "clang 19; flags=-O3\n", ejk::util::xxh3_128_hex(binary_of(n, 8))};
}

// Three entries of 3-5 KB, in the order the writer lays them out (by key).
std::vector<uint8_t> three_entry_bundle() {
  std::vector<Entry> entries;
  for (int n = 0; n < 3; ++n) entries.push_back(make_entry(meta_of(n), binary_of(n, 3000 + 1000 * n)));
  return encode_bundle(std::move(entries), "0.1.0-test");
}

// The reader borrows `bytes`: they must outlive it.
Reader read_bundle(const std::vector<uint8_t>& bytes) {
  return Reader(std::make_unique<MemorySource>(bytes), "test.ejkb");
}

std::string open_error(const std::vector<uint8_t>& bytes) {
  try {
    read_bundle(bytes);
  } catch (const ejk::InvalidArgument& e) {
    return e.what();
  }
  return "opened";
}

// Where entry i's record and payload lie, from the slots (the bundle as written, not damaged).
struct Placement {
  uint64_t record = 0, payload = 0, payload_size = 0;
};
Placement placement(const std::vector<uint8_t>& bytes, size_t i) {
  const Reader r = read_bundle(bytes);
  const Record& rec = *r.slots()[i].record;
  return {kHeaderSize + get_u64(bytes, kHeaderSize + i * kSlotSize), rec.payload_offset, rec.stored_size};
}

void require_intact(const Reader& r, size_t i) {
  const Payload p = r.read(i);
  INFO(p.problem);
  REQUIRE(p.problem.empty());
  CHECK(p.bytes == binary_of(int(i), 3000 + 1000 * i));
}

}  // namespace

TEST_CASE("a bundle reads back what was written, byte for byte, in a stable order", "[bundle][format]") {
  const std::vector<uint8_t> bytes = three_entry_bundle();
  const Reader r = read_bundle(bytes);
  CHECK(r.header().generator_version == "0.1.0-test");
  CHECK(r.header().file_size == bytes.size());
  CHECK(r.problems().empty());
  REQUIRE(r.slots().size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    REQUIRE(r.slots()[i].record);
    CHECK(r.slots()[i].record->meta.key == meta_of(int(i)).key);
    CHECK(r.slots()[i].record->meta.compiler == meta_of(int(i)).compiler);
    require_intact(r, i);
  }
  std::vector<Entry> reversed;
  for (int n = 2; n >= 0; --n) reversed.push_back(make_entry(meta_of(n), binary_of(n, 3000 + 1000 * n)));
  CHECK(encode_bundle(std::move(reversed), "0.1.0-test") == bytes);
}

TEST_CASE("a newer format version is refused naming both versions and the bundle's generator", "[bundle][format]") {
  std::vector<uint8_t> bytes = three_entry_bundle();
  bytes[8] = 2;  // a future layout may differ past the first 48 bytes: nothing else is read
  CHECK_THAT(open_error(bytes), ContainsSubstring("format version 2 is newer than this library reads (version 1)") &&
                                    ContainsSubstring("generator 0.1.0-test"));
}

TEST_CASE("header damage makes the whole bundle unusable, with a specific message", "[bundle][format]") {
  std::vector<uint8_t> bytes = three_entry_bundle();
  SECTION("magic") {
    bytes[0] ^= 0x20;
    CHECK_THAT(open_error(bytes), ContainsSubstring("not an ejk bundle"));
  }
  SECTION("a size field") {
    bytes[66] ^= 0x01;  // manifest size
    CHECK_THAT(open_error(bytes), ContainsSubstring("header: checksum"));
  }
  SECTION("the generator version") {
    bytes[17] ^= 0x04;
    CHECK_THAT(open_error(bytes), ContainsSubstring("header: checksum"));
  }
  SECTION("truncated inside the header") {
    bytes.resize(100);
    CHECK_THAT(open_error(bytes), ContainsSubstring("header: truncated"));
  }
  SECTION("truncated inside the manifest") {
    bytes.resize(kHeaderSize + 20);
    CHECK_THAT(open_error(bytes), ContainsSubstring("manifest: truncated"));
  }
}

TEST_CASE("damage to one entry's record or payload leaves the others usable", "[bundle][format]") {
  std::vector<uint8_t> bytes = three_entry_bundle();
  const Placement p1 = placement(bytes, 1);
  std::string expected;
  SECTION("its manifest record") {
    bytes[p1.record + 60] ^= 0x10;  // inside the key
    expected = "record checksum";
  }
  SECTION("its manifest slot") {
    bytes[kHeaderSize + kSlotSize + 2] ^= 0x40;  // record offset
    expected = "outside the manifest";
  }
  SECTION("its payload") {
    bytes[p1.payload + p1.payload_size / 2] ^= 0x01;
    expected = "payload: checksum";
  }
  const Reader r = read_bundle(bytes);
  const Payload bad = r.read(1);
  CHECK_THAT(bad.problem, ContainsSubstring(expected));
  CHECK(bad.bytes.empty());
  require_intact(r, 0);
  require_intact(r, 2);
}

TEST_CASE("a truncated file keeps the entries before the cut", "[bundle][format]") {
  std::vector<uint8_t> bytes = three_entry_bundle();
  const Placement last = placement(bytes, 2);
  bytes.resize(last.payload + last.payload_size / 2);
  const Reader r = read_bundle(bytes);
  REQUIRE(r.problems().size() == 1);
  CHECK_THAT(r.problems()[0], ContainsSubstring("truncated"));
  CHECK_THAT(r.read(2).problem, ContainsSubstring("payload: truncated"));
  require_intact(r, 0);
  require_intact(r, 1);
}

TEST_CASE("stored bytes that are not one zstd frame of the recorded size are refused", "[bundle][format]") {
  Entry e = make_entry(meta_of(0), binary_of(0, 3000));
  SECTION("not zstd at all") {
    e.stored = binary_of(5, 200);
  }
  SECTION("a frame of another size") {
    e = make_entry(meta_of(0), binary_of(0, 2999));
    e.size = 3000;
  }
  e.stored_checksum = ejk::util::xxh3_64(e.stored);  // the checksums pass: the frame check must not
  std::vector<Entry> entries;
  entries.push_back(std::move(e));
  const std::vector<uint8_t> bytes = encode_bundle(std::move(entries), "0.1.0-test");
  CHECK_THAT(read_bundle(bytes).read(0).problem, ContainsSubstring("zstd"));
}

TEST_CASE("any single flipped bit is refused or harmless, never a different payload", "[bundle][format]") {
  const std::vector<uint8_t> good = three_entry_bundle();
  for (size_t at = 0; at < good.size(); ++at) {
    std::vector<uint8_t> bytes = good;
    bytes[at] ^= uint8_t(1u << (at % 8));
    try {
      const Reader r = read_bundle(bytes);
      for (size_t i = 0; i < r.slots().size(); ++i) {
        const Payload p = r.read(i);
        if (p.problem.empty()) {
          INFO("flipped byte " << at << ", entry " << i);
          CHECK(p.bytes == binary_of(int(i), 3000 + 1000 * i));
        }
      }
    } catch (const ejk::InvalidArgument&) {
    }
  }
}

TEST_CASE("the writer refuses duplicates and names that are not file-name safe", "[bundle][format]") {
  std::vector<Entry> twice;
  twice.push_back(make_entry(meta_of(0), binary_of(0, 100)));
  twice.push_back(make_entry(meta_of(0), binary_of(1, 100)));
  CHECK_THROWS_WITH(encode_bundle(std::move(twice), "v"), ContainsSubstring("given twice"));
  EntryMeta bad = meta_of(0);
  bad.key = "../escape";
  CHECK_THROWS_WITH(make_entry(bad, binary_of(0, 100)), ContainsSubstring("[A-Za-z0-9._-]"));
  bad = meta_of(0);
  bad.content_hash = "XYZ";
  CHECK_THROWS_WITH(make_entry(bad, binary_of(0, 100)), ContainsSubstring("32 lowercase hex"));
  CHECK_THROWS_WITH(make_entry(meta_of(0), {}), ContainsSubstring("a binary of 0 bytes"));
}

TEST_CASE("bundle files others may write, and non-files, are not used", "[bundle][format]") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("ejk-bundle-format-{}", getpid());
  fs::create_directories(dir);
  const fs::path file = dir / "b.ejkb";
  const std::vector<uint8_t> bytes = three_entry_bundle();
  std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ::chmod(file.c_str(), 0644);
  CHECK(Reader(FileSource::open(file), file.string()).slots().size() == 3);
  ::chmod(file.c_str(), 0664);
  CHECK_THROWS_WITH(FileSource::open(file), ContainsSubstring("writable by group or others"));
  CHECK(FileSource::open(file, /*require_trust=*/false)->size() == bytes.size());  // inspecting is fine
  ::chmod(file.c_str(), 0644);
  ::chmod(dir.c_str(), 0777);  // others could swap the bundle for their own
  CHECK_THROWS_WITH(FileSource::open(file), ContainsSubstring("writable by other users"));
  ::chmod(dir.c_str(), 01777);  // sticky, as /tmp: they cannot replace our file
  CHECK(Reader(FileSource::open(file), file.string()).slots().size() == 3);
  ::chmod(dir.c_str(), 0755);
  const fs::path fifo = dir / "fifo.ejkb";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(FileSource::open(fifo), ContainsSubstring("not a regular file"));
  CHECK_THROWS_WITH(FileSource::open(dir / "missing.ejkb"), ContainsSubstring("cannot open"));
  fs::remove_all(dir);
}

TEST_CASE("a payload cannot decompress past what its kind can be, nor at a ratio no binary has", "[bundle][format]") {
  SECTION("a CPU object larger than any kernel") {
    Entry e = make_entry(meta_of(0), binary_of(0, 3000));
    e.size = kMaxCpuObjectSize + 1;  // the record's claim is refused before any payload is read
    std::vector<Entry> entries;
    entries.push_back(std::move(e));
    const std::vector<uint8_t> bytes = encode_bundle(std::move(entries), "0.1.0-test");
    const Reader r = read_bundle(bytes);
    REQUIRE_FALSE(r.slots()[0].record);
    CHECK_THAT(r.slots()[0].problem, ContainsSubstring("a cpu entry of"));
  }
  SECTION("a frame of zeros") {
    std::vector<Entry> entries;
    entries.push_back(make_entry(meta_of(0), std::vector<uint8_t>(8u << 20, 0)));
    const std::vector<uint8_t> bytes = encode_bundle(std::move(entries), "0.1.0-test");
    const Reader r = read_bundle(bytes);
    REQUIRE_FALSE(r.slots()[0].record);
    CHECK_THAT(r.slots()[0].problem, ContainsSubstring("compression"));
  }
  SECTION("a backend bundles do not hold") {
    EntryMeta m = meta_of(0);
    m.backend = "hip";
    std::vector<Entry> entries;
    entries.push_back(make_entry(m, binary_of(0, 3000)));
    const std::vector<uint8_t> bytes = encode_bundle(std::move(entries), "0.1.0-test");
    CHECK_THAT(read_bundle(bytes).slots()[0].problem, ContainsSubstring("backend \"hip\""));
  }
}

TEST_CASE("records that share one stored payload are refused after the first", "[bundle][format]") {
  // Two entries of the same binary compress to the same bytes; entry 1's record is pointed at
  // entry 0's payload and its record checksum made valid again.
  std::vector<Entry> entries;
  for (int n = 0; n < 2; ++n) entries.push_back(make_entry(meta_of(n), binary_of(0, 4000)));
  std::vector<uint8_t> bytes = encode_bundle(std::move(entries), "0.1.0-test");
  const Placement p0 = placement(bytes, 0), p1 = placement(bytes, 1);
  REQUIRE(p0.payload_size == p1.payload_size);
  const uint32_t record_size = get_u32(bytes, kHeaderSize + kSlotSize + 8);
  for (int b = 0; b < 8; ++b) bytes[p1.record + b] = uint8_t(p0.payload >> (8 * b));
  const uint64_t sum = ejk::util::xxh3_64(std::span<const uint8_t>(bytes.data() + p1.record, record_size - 8));
  for (int b = 0; b < 8; ++b) bytes[p1.record + record_size - 8 + b] = uint8_t(sum >> (8 * b));
  const Reader r = read_bundle(bytes);
  CHECK(r.read(0).bytes == binary_of(0, 4000));
  REQUIRE_FALSE(r.slots()[1].record);
  CHECK_THAT(r.slots()[1].problem, ContainsSubstring("overlaps entry 0"));
}
