// End-to-end tests of `sluice model` (make, quantize, info) and `sluice tokenize`: run the
// binary as a user would and check what it prints and writes.
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_test_util.h"
#include "common/utf8.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernel_path.h"

namespace sluice {
namespace {

using namespace cli_testing;

TEST(Cli, TokenizeVocabularyOnlyFile) {
  if (!have_shared()) GTEST_SKIP() << "no shared tokenizers";
  Output o = run("tokenize -m " + kShared + "/tokenizer/ggml-vocab-llama-spm.gguf --no-bos 'Hello world'");
  ASSERT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.out, "15043 3186\n");
  Output pieces = run("tokenize -m " + kShared + "/tokenizer/ggml-vocab-llama-spm.gguf --pieces 'Hello'");
  EXPECT_NE(pieces.out.find("1\t'<s>'\t<s>"), std::string::npos) << pieces.out;
}

TEST(Cli, ModelMakeThenInfo) {
  const std::string path = ::testing::TempDir() + "/cli_made.gguf";
  Output made = run("model make --arch qwen3 --preset tiny --head-dim 32 --dtype bf16 --seed 3 -o " + path);
  ASSERT_EQ(made.exit_code, 0);
  Output info = run("model info " + path);
  ASSERT_EQ(info.exit_code, 0);
  EXPECT_NE(info.out.find("architecture:    qwen3"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("head dim 32"), std::string::npos);
  EXPECT_NE(info.out.find("BF16"), std::string::npos);
  EXPECT_NE(info.out.find("tokenizer:       bpe"), std::string::npos);
  Output gen = run("generate -m " + path + " -p abc -n 4 --ignore-eos --json");
  ASSERT_EQ(gen.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(gen.out)["tokens"].size(), 4u);
  std::filesystem::remove(path);
}

// Quantize the shared F32 model to a K-quant mix, read it back, generate; a quantized input and an
// unknown mix are clear errors.
TEST(Cli, ModelQuantizeThenInfoAndGenerate) {
  const std::string in = kShared + "/models/quant/llama-d256-s21-F32.gguf";
  const std::string path = ::testing::TempDir() + "/cli_quantized.gguf";
  Output q = run("model quantize " + in + " " + path + " --type Q4_K_M -t 2", true);  // either case
  ASSERT_EQ(q.exit_code, 0) << q.out;
  EXPECT_NE(q.out.find("q4_k_m (F32 x9, Q4_K x25, Q6_K x5)"), std::string::npos) << q.out;
  Output info = run("model info " + path);
  ASSERT_EQ(info.exit_code, 0);
  EXPECT_NE(info.out.find("Q4_K      25 tensors"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("4.50 bits per weight"), std::string::npos) << info.out;
  Output gen = run("generate -m " + path + " -p abc -n 4 --ignore-eos --json");
  ASSERT_EQ(gen.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(gen.out)["tokens"].size(), 4u);
  // On a terminal (script(1) gives it one) the progress counts weights, and says so: the F32
  // model's 5.25 million, not MiB.
  if (std::system("command -v script >/dev/null 2>&1") == 0) {
    const std::string bin = sluice::testing::binary_dir() + "/src/cli/sluice";
    const std::string tty = shell("script -qec '" + bin + " model quantize " + in + " " + path + ".tty --type q8_0 -t 2' /dev/null");
    EXPECT_NE(tty.find("100% (5 / 5 M weights)"), std::string::npos) << tty;
    std::filesystem::remove(path + ".tty");
  }
  Output again = run("model quantize " + path + " " + path + ".2 --type q4_0", true);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.out.find("is Q4_K: quantize from a file of F32, F16 or BF16 weights"), std::string::npos) << again.out;
  EXPECT_FALSE(std::filesystem::exists(path + ".2"));
  Output bad = run("model quantize " + in + " " + path + ".2 --type q4_k", true);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("unknown quantization type 'q4_k' (choose q8_0, "), std::string::npos) << bad.out;
  std::filesystem::remove(path);
  Output vocab_only = run("model quantize " + kShared + "/tokenizer/ggml-vocab-qwen2.gguf " + path + " --type q8_0", true);
  EXPECT_EQ(vocab_only.exit_code, 1);
  EXPECT_NE(vocab_only.out.find("holds no tensors (a vocabulary-only file?)"), std::string::npos) << vocab_only.out;
  // A context must hold a prompt token and a generated one.
  Output ctx = run("model make --ctx 1 -o " + path, true);
  EXPECT_EQ(ctx.exit_code, 2);
  EXPECT_NE(ctx.out.find("--ctx must be in 2.."), std::string::npos) << ctx.out;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Cli, DemoInfoSaysGibberish) {
  Output o = run("model info demo");
  ASSERT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("RANDOM weights"), std::string::npos);
}

TEST(Cli, ModelMakeReplacesOnlyRegularFiles) {
  const std::string dir = ::testing::TempDir() + "/cli_make_dir";
  std::filesystem::create_directories(dir);
  Output o = run("model make -o " + dir, true);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("is not a regular file"), std::string::npos) << o.out;
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  const std::string target = ::testing::TempDir() + "/cli_make_target", link = ::testing::TempDir() + "/cli_make_link";
  std::ofstream(target) << "keep";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  Output l = run("model make -o " + link, true);
  EXPECT_EQ(l.exit_code, 1);
  EXPECT_NE(l.out.find("it is a symbolic link"), std::string::npos) << l.out;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  // A file replaced keeps its owner, group and mode (where this process may give them: root).
  if (::geteuid() == 0) {
    const std::string owned = ::testing::TempDir() + "/cli_make_owned.gguf";
    std::ofstream(owned) << "old";
    ASSERT_EQ(::chown(owned.c_str(), 65534, 65534), 0);
    ASSERT_EQ(::chmod(owned.c_str(), 0640), 0);
    ASSERT_EQ(run("model make --preset tiny -o " + owned, true).exit_code, 0);
    struct stat st {};
    ASSERT_EQ(::stat(owned.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(st.st_gid, 65534u);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    std::filesystem::remove(owned);
  }
  std::filesystem::remove(link);
  std::filesystem::remove(target);
  std::filesystem::remove_all(dir);
}

// An output that is the input however spelt (absolute, through a link) is refused, the input
// kept: quantize's model, make's --vocab.
TEST(Cli, OutputThatIsTheInputIsRefused) {
  if (!have_shared()) GTEST_SKIP() << "no shared models";
  const std::string dir = ::testing::TempDir() + "/cli_same";
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/in.gguf", link = dir + "/link.gguf";
  std::filesystem::copy_file(kShared + "/models/stories260K.gguf", in, std::filesystem::copy_options::overwrite_existing);
  const auto size = std::filesystem::file_size(in);
  std::filesystem::remove(link);
  std::filesystem::create_symlink(in, link);
  for (const std::string& out : {dir + "/./in.gguf", link}) {
    Output q = run("model quantize " + in + " " + out + " --type q8_0", true);
    EXPECT_EQ(q.exit_code, 2) << q.out;
    EXPECT_NE(q.out.find("is the input file"), std::string::npos) << q.out;
    Output m = run("model make --vocab " + link + " -o " + out, true);
    EXPECT_EQ(m.exit_code, 2) << m.out;
    EXPECT_NE(m.out.find("is the --vocab file"), std::string::npos) << m.out;
  }
  EXPECT_EQ(std::filesystem::file_size(in), size);
  // An unreadable --vocab file is a bad file (1), not a bad command line.
  Output missing = run("model make --vocab " + dir + "/nothing.gguf -o " + dir + "/x.gguf", true);
  EXPECT_EQ(missing.exit_code, 1) << missing.out;
  std::filesystem::remove_all(dir);
}

// What make writes is loaded back with its tokenizer: a --vocab whose tokenizer cannot load
// fails the make, and the file is removed.
TEST(Cli, ModelMakeChecksTheTokenizerItCopies) {
  if (!have_shared()) GTEST_SKIP() << "no shared models";
  auto src = gguf::File::open(kShared + "/models/stories260K.gguf");
  ASSERT_TRUE(src) << src.error().message();
  gguf::Writer w;
  for (const auto& [key, value] : (*src)->metadata()) w.set(std::string(key), gguf::to_owned(value));
  w.set_string("tokenizer.ggml.model", "bogus");
  const std::string vocab = ::testing::TempDir() + "/cli_bogus_vocab.gguf", out = ::testing::TempDir() + "/cli_bogus.gguf";
  ASSERT_TRUE(w.write_file(vocab));
  std::ofstream(out) << "an earlier output";  // checked before it is replaced: kept
  Output m = run("model make --vocab " + vocab + " -o " + out, true);
  EXPECT_EQ(m.exit_code, 1) << m.out;
  EXPECT_NE(m.out.find("the made model's tokenizer does not load (not kept)"), std::string::npos) << m.out;
  std::ifstream kept(out);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "an earlier output");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(::testing::TempDir())) {
    entries += e.path().filename().string().starts_with("cli_bogus.gguf.partial");
  }
  EXPECT_EQ(entries, 0);
  std::filesystem::remove(vocab);
  std::filesystem::remove(out);
}

// Writes go to a file with no name until complete: nothing is left beside the output, a file
// it replaces keeps its mode, and a missing directory is named as such.
TEST(Cli, ModelMakeLeavesNoTemporaryFiles) {
  const std::string dir = ::testing::TempDir() + "/cli_tmpfile";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string out = dir + "/m.gguf";
  std::ofstream(out) << "old";
  std::filesystem::permissions(out, std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  Output o = run("model make --preset tiny -o " + out, true);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(std::filesystem::status(out).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1);
  Output missing = run("model make --preset tiny -o " + dir + "/no/such/m.gguf", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("cannot write '" + dir + "/no/such/m.gguf': No such file or directory"), std::string::npos)
      << missing.out;
  std::filesystem::remove_all(dir);
}

// Text from a file reaches the terminal escaped: a name with an escape sequence, a bell and a
// newline (a forged line of output), an architecture that is not UTF-8.
TEST(Cli, ModelInfoEscapesTheFilesText) {
  const std::string path = ::testing::TempDir() + "/cli_hostile_name.gguf";
  gguf::Writer w;
  w.set_string("general.name", "a\x1b]0;title\x07\nfake: ok");
  w.set_string("general.architecture", "ll\xffma");
  ASSERT_TRUE(w.write_file(path));
  for (const std::string flags : {"", " -a"}) {
    Output info = run("model info " + path + flags, true);
    EXPECT_NE(info.out.find("name:            a\\x1b]0;title\\x07\\x0afake: ok\n"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("ll\xef\xbf\xbdma"), std::string::npos) << info.out;
    EXPECT_EQ(info.out.find('\x1b'), std::string::npos) << info.out;
    EXPECT_TRUE(utf8_is_valid(info.out)) << info.out;
  }
  std::filesystem::remove(path);
}

// A kernel path forced by the environment is checked before any work (it was checked when the
// written model was loaded back, and left it behind), in either case; a shape too large for this
// machine's memory is refused before it is made (it was an out-of-memory "internal error").
TEST(Cli, ModelMakeRefusesWhatCannotRunBeforeAnyWork) {
  const std::string dir = ::testing::TempDir() + "/cli_refused";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string bin = sluice::testing::binary_dir() + "/src/cli/sluice";
  const std::string bogus =
      shell("SLUICE_KERNELS=bogus " + bin + " model make --preset tiny -o " + dir + "/m.gguf 2>&1; echo rc=$?");
  EXPECT_NE(bogus.find("SLUICE_KERNELS=bogus: unknown kernel path 'bogus'"), std::string::npos) << bogus;
  EXPECT_NE(bogus.find("rc=2"), std::string::npos) << bogus;
  const std::string repack = shell("SLUICE_REPACK=sometimes " + bin + " generate -m demo -p x -n 1 2>&1; echo rc=$?");
  EXPECT_NE(repack.find("SLUICE_REPACK=sometimes: expected auto, on, lean or off"), std::string::npos) << repack;
  EXPECT_NE(repack.find("rc=2"), std::string::npos) << repack;
  if (kernels::kernel_path_runs(kernels::KernelPath::kAvx2)) {
    const std::string upper =
        shell("SLUICE_KERNELS=AVX2 " + bin + " model make --preset tiny -o " + dir + "/m.gguf 2>&1; echo rc=$?");
    EXPECT_NE(upper.find("rc=0"), std::string::npos) << upper;
  }
  std::filesystem::remove(dir + "/m.gguf");
  Output huge =
      run("model make --dim 65536 --ffn 262144 --layers 256 --vocab-size 4194304 --heads 64 --kv-heads 8 -o " + dir +
              "/huge.gguf",
          true);
  EXPECT_EQ(huge.exit_code, 2) << huge.out;
  EXPECT_NE(huge.out.find("this model would take 61440.1 GiB of memory to make (60416.1 GiB of weights), more than"),
            std::string::npos)
      << huge.out;
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 0);
  std::filesystem::remove_all(dir);
}

TEST(Cli, PiecesAreValidUtf8) {
  if (!have_shared()) GTEST_SKIP() << "no shared tokenizers";
  // U+1F642 is not in the SPM vocabulary: it falls back to four byte tokens, each shown escaped.
  Output o = run("tokenize -m " + kShared + "/tokenizer/ggml-vocab-llama-spm.gguf --pieces \"$(printf '\\360\\237\\231\\202')\"");
  ASSERT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("'\\xf0'"), std::string::npos) << o.out;
  EXPECT_TRUE(utf8_is_valid(o.out)) << o.out;
}

}  // namespace
}  // namespace sluice
