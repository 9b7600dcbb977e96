// The shipped full models (models/hf/): every published config.json is
// listed, converts, and counts its model card's parameters; the catalog
// answers for them by name and says which file each came from.

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/frontends/frontend_registry.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "nlohmann/json.hpp"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const std::string kModels = std::string(HEADROOM_SOURCE_DIR) + "/models";
const std::string kHf = kModels + "/hf";

// What a model card publishes: its parameter count as printed, in billions;
// for Qwen also the count without the embeddings (and untied LM head).
struct CardCount {
  double billions;
  double non_embedding_billions = 0;
  // An exact published count, where one was found (0: none).
  uint64_t exact = 0;
  // Where the card prints a size rather than a count ("7B" for 6.74B, "2.7
  // billion" for 2.78B): the billions are the count rounded (truncated, if
  // `truncated`) to this many significant digits. 0: the count is within
  // kCardTolerance.
  int digits = 0;
  bool truncated = false;
};

// How far a count may sit from its card: cards print two or three digits,
// rounded ("0.49B"), truncated ("1.23B" for 1,235,814,400) or low (Qwen2.5's
// "32.5B" for the 32,763,876,352 its config builds, 0.8 %), so the card
// check is at 1 %; the exact count is checked by hand from the config.
constexpr double kCardTolerance = 0.01;

// Each shipped full model's published parameter count. Cards quoted from their
// copies in ZHUI/paddlenlp_model_readme (commit 40a7101e, <hub name>/index.md)
// unless said otherwise. "keras-hub" is keras-team/keras-hub at 71453d08,
// keras_hub/src/models/<family>/<family>_presets.py: the exact "params" its
// preset converted from the Hub checkpoint counts (an independent
// implementation of the same weights).
const std::map<std::string, CardCount>& Cards() {
  static const auto* kCards = new std::map<std::string, CardCount>{
      // BertModel with its pooler. google-research/bert's README:
      // "BERT-Base, Uncased: 12-layer, 768-hidden, 12-heads, 110M
      // parameters"; 109,482,240 as HfConfigTest pins.
      {"bert-base-uncased", {0.110}},
      // openai-community/gpt2's card, as Azure/azureml-assets copies it
      // (assets/models/system/gpt2/description.md): "This is the smallest
      // version of GPT-2, with 124M parameters"; GPT2LMHeadModel (tied
      // head) counts 124,439,808, as HfConfigTest pins.
      {"gpt2-124m", {0.124}},
      // meta-llama/Llama-3.2-1B card table: "1B (1.23B)", "3B (3.21B)".
      {"llama-3.2-1b", {1.23}},
      {"llama-3.2-3b", {3.21}},
      // The Llama 3.1 card's "8B" (not in that copy); the geometry of
      // Meta-Llama-3-8B, whose Hub safetensors total is 8,030,261,248 (the
      // Hub's model API as daniel-p-green/alain-ai-learning-platform stores
      // it, out/research-meta-llama-meta-llama-3-8b/sources/huggingface/
      // model.json), the count this config converts to.
      {"llama-3.1-8b", {8}},
      // The Llama 3.1 card's table row "70B" (Jrkrish/Smart-Recipe-Planner,
      // Llama-3.1-70B/README.md at 1c557df1, a Hub snapshot); exact: the
      // snapshot's model.safetensors.index.json "total_size": 141107412992
      // bytes of BF16 tensors, 70,553,706,496 parameters.
      {"llama-3.1-70b", {70, 0, 70553706496}},
      // Qwen cards: "Number of Parameters: 3.09B / Number of Paramaters
      // (Non-Embedding): 2.77B", 7.61B / 6.53B, 14.7B / 13.1B, 32.5B / 31.0B.
      {"qwen2.5-3b", {3.09, 2.77}},
      {"qwen2.5-7b", {7.61, 6.53}},
      {"qwen2.5-14b", {14.7, 13.1}},
      {"qwen2.5-32b", {32.5, 31.0}},
      // Qwen/Qwen3-8B's card: "Number of Parameters: 8.2B / Number of
      // Paramaters (Non-Embedding): 6.95B" (not in that copy; a public
      // profile of the model quotes both).
      {"qwen3-8b", {8.2, 6.95}},
      // TinyLlama/TinyLlama-1.1B-Chat-v1.0's card (its Hub snapshot in
      // tejashwinn/repo-for-file-transfer, tinyllama/README.md at
      // 8d156589): "TinyLlama is compact with only 1.1B parameters".
      {"tinyllama-1.1b-chat-v1.0", {1.1}},
      // The Llama 2 card's table (meta-llama/Llama-2-7b/index.md): Params
      // "7B", "13B", "70B", sizes printed to one or two digits (6.74B, 13.0B,
      // 69.0B); keras-hub's llama2_7b_en: 6738415616.
      {"llama-2-7b", {7, 0, 6738415616, 1}},
      {"llama-2-13b", {13, 0, 0, 2}},
      {"llama-2-70b", {70, 0, 0, 1}},
      // The Llama 3 card's table (meta-llama/Meta-Llama-3-8B/index.md):
      // "8B"; keras-hub's llama3_8b_en: 8030261248.
      {"llama-3-8b", {8, 0, 8030261248}},
      // The Qwen2-7B card's comparison table: Mistral-7B "# Params 7.2B",
      // "# Non-emb Params 7.0B" (Mistral's own card: "7 billion
      // parameters"); keras-hub's mistral_7b_en: 7241732096.
      {"mistral-7b-v0.1", {7.2, 7.0, 7241732096}},
      // Mixtral-8x7B's card as Azure/azureml-assets copies it (4b41f8cc,
      // assets/models/system/Mixtral-8x7B-v0-1/description.md): "Mixtral has
      // 46.7B total parameters"; keras-hub's mixtral_8_7b_en: 46702792704.
      {"mixtral-8x7b-v0.1", {46.7, 0, 46702792704}},
      // The Qwen2-7B card's table: Qwen2-7B "# Params 7.6B", "# Non-emb
      // Params 6.5B".
      {"qwen2-7b", {7.6, 6.5}},
      // The Qwen2-72B card's table: Qwen2-72B "#Params 72B" (72.7B
      // truncated).
      {"qwen2-72b", {72, 0, 0, 2, true}},
      // keras-hub's qwen3_4b_en "with 4.02B parameters" (4022468096),
      // qwen3_14b_en 14.77B (14768307200), qwen3_32b_en 32.76B
      // (32762123264).
      {"qwen3-4b", {4.02, 0, 4022468096}},
      {"qwen3-14b", {14.77, 0, 14768307200}},
      {"qwen3-32b", {32.76, 0, 32762123264}},
      // keras-hub's gemma2_2b_en ("2 billion parameter", 2614341888) and
      // gemma2_9b_en ("9 billion parameter", 9241705984).
      {"gemma-2-2b", {2, 0, 2614341888, 1, true}},
      {"gemma-2-9b", {9, 0, 9241705984, 1}},
      // phi-2's card as Azure/azureml-assets copies it (4b41f8cc,
      // assets/models/system/microsoft-phi-2/description.md): "a language
      // model with 2.7 billion parameters" (2.78B truncated); the Qwen2-0.5B
      // card's table: Phi-2 "#Non-Emb Params 2.5B".
      {"phi-2", {2.7, 2.5, 0, 2, true}},
      // t5-base's card as Azure/azureml-assets copies it
      // (assets/models/system/t5-base/description.md): "T5-Base is the
      // checkpoint with 220 million parameters"; keras-hub's t5_base_multi:
      // 222903552. T5-Large's card says "770 million", which this count
      // (737,668,096 with the LM head tied to the shared embedding, as the
      // config's default ties it) does not round to; keras-hub's
      // t5_large_multi prints the same 737668096, the check here.
      {"t5-base", {0.22, 0, 222903552, 2}},
      {"t5-large", {0.738, 0, 737668096}},
  };
  return *kCards;
}

nlohmann::json Index() {
  absl::StatusOr<std::string> text = ReadFile(kHf + "/index.json");
  EXPECT_TRUE(text.ok()) << text.status();
  return nlohmann::json::parse(text.ok() ? *text : "{}");
}

// A Llama-family decoder's count by hand from its config: embeddings, per
// layer q/k/v/o (Qwen2's q/k/v biases, Qwen3's q/k norms), the gated MLP
// (Mixtral: its experts and router) and two RMSNorms (Gemma 2: four), the
// final norm, and the LM head unless tied (Gemma 2's config leaves
// tie_word_embeddings to Gemma2Config's default, true).
uint64_t DecoderByHand(const nlohmann::json& c) {
  const uint64_t h = c["hidden_size"], layers = c["num_hidden_layers"];
  const uint64_t vocab = c["vocab_size"], ffn = c["intermediate_size"];
  const uint64_t heads = c["num_attention_heads"];
  const uint64_t kv = c.value("num_key_value_heads", heads);
  const uint64_t head_dim = c.value("head_dim", h / heads);
  const std::string type = c["model_type"];
  const uint64_t experts = c.value("num_local_experts", 1);
  uint64_t layer = h * heads * head_dim + 2 * h * kv * head_dim +
                   heads * head_dim * h + experts * 3 * h * ffn +
                   (type == "gemma2" ? 4 : 2) * h;
  if (type == "mixtral") layer += h * experts;
  if (type == "qwen2") layer += heads * head_dim + 2 * kv * head_dim;
  if (type == "qwen3") layer += 2 * head_dim;
  const bool tied = c.value("tie_word_embeddings", type == "gemma2");
  return vocab * h + layers * layer + h + (tied ? 0 : vocab * h);
}

// Phi-2 by hand: the embedding; per layer one LayerNorm, q/k/v/dense and
// fc1/fc2, all with biases; the final LayerNorm; the LM head with a bias.
uint64_t PhiByHand(const nlohmann::json& c) {
  const uint64_t h = c["hidden_size"], layers = c["num_hidden_layers"];
  const uint64_t vocab = c["vocab_size"], ffn = c["intermediate_size"];
  const uint64_t layer =
      2 * h + 4 * (h * h + h) + (h * ffn + ffn) + (ffn * h + h);
  return vocab * h + layers * layer + 2 * h + (h * vocab + vocab);
}

// T5 (v1.0) by hand: the shared embedding (the LM head tied to it); encoder
// layers of self-attention q/k/v/o, the ReLU FFN and two RMS norms; decoder
// layers with cross-attention and a third norm; each stack's relative
// position table (buckets x heads, in its first layer) and final norm.
uint64_t T5ByHand(const nlohmann::json& c) {
  const uint64_t d = c["d_model"], ff = c["d_ff"], layers = c["num_layers"];
  const uint64_t inner = uint64_t{c["num_heads"]} * uint64_t{c["d_kv"]};
  const uint64_t buckets =
      uint64_t{c["relative_attention_num_buckets"]} * uint64_t{c["num_heads"]};
  const uint64_t decoder_layers = c.value("num_decoder_layers", layers);
  const uint64_t encoder = layers * (4 * d * inner + 2 * d * ff + 2 * d);
  const uint64_t decoder =
      decoder_layers * (8 * d * inner + 2 * d * ff + 3 * d);
  return uint64_t{c["vocab_size"]} * d + encoder + decoder + 2 * buckets +
         2 * d;
}

// The count as a card prints it: `digits` significant digits, rounded or
// truncated, in billions.
bool PrintsAs(uint64_t count, const CardCount& card) {
  const double value = static_cast<double>(count) / 1e9;
  const double scale =
      std::pow(10.0, std::floor(std::log10(value)) - card.digits + 1);
  const double printed = card.truncated ? std::floor(value / scale) * scale
                                        : std::round(value / scale) * scale;
  return std::abs(printed - card.billions) < scale / 100;
}

// GPT-2 by hand: token and position tables, per layer two LayerNorms,
// c_attn (h x 3h), c_proj, the 4h MLP, all with biases; ln_f; tied head.
uint64_t Gpt2ByHand(const nlohmann::json& c) {
  const uint64_t h = c["n_embd"], layers = c["n_layer"];
  const uint64_t layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) +
                         (h * 4 * h + 4 * h) + (4 * h * h + h);
  return uint64_t{c["vocab_size"]} * h + uint64_t{c["n_positions"]} * h +
         layers * layer + 2 * h;
}

// BERT by hand: word, position and token-type tables and their LayerNorm;
// per layer q/k/v/o with biases, two LayerNorms and the MLP with biases; the
// pooler.
uint64_t BertByHand(const nlohmann::json& c) {
  const uint64_t h = c["hidden_size"], layers = c["num_hidden_layers"];
  const uint64_t ffn = c["intermediate_size"];
  const uint64_t layer =
      4 * (h * h + h) + 2 * 2 * h + (h * ffn + ffn) + (ffn * h + h);
  return (uint64_t{c["vocab_size"]} + uint64_t{c["max_position_embeddings"]} +
          uint64_t{c["type_vocab_size"]}) *
             h +
         2 * h + layers * layer + (h * h + h);
}

TEST(FullModelsTest, EveryFileIsListedAndEveryListedModelHasACard) {
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kHf)) {
    if (entry.path().extension() == ".json" &&
        entry.path().filename() != "index.json") {
      files.insert(entry.path().stem().string());
    }
  }
  std::set<std::string> listed;
  const nlohmann::json index = Index();
  for (const nlohmann::json& m : index["models"]) listed.insert(m["name"]);
  EXPECT_EQ(files, listed);
  std::set<std::string> carded;
  for (const auto& [name, card] : Cards()) carded.insert(name);
  EXPECT_EQ(listed, carded);
  EXPECT_GE(listed.size(), 28u);
}

// Each file converts by the Hugging Face front-end to its card's count, and
// to the count by hand from the same config.
TEST(FullModelsTest, CountsAgreeWithTheModelCards) {
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(kModels);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  for (const auto& [name, card] : Cards()) {
    absl::StatusOr<const v1::ModelSpec*> spec = catalog->Find(name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const uint64_t counted = CountParams(**spec);
    if (card.digits > 0) {
      EXPECT_TRUE(PrintsAs(counted, card))
          << name << ": " << counted << " vs the card's " << card.billions
          << "B";
    } else {
      EXPECT_LE(
          std::abs(static_cast<double>(counted) / 1e9 / card.billions - 1),
          kCardTolerance)
          << name << ": " << counted << " vs the card's " << card.billions
          << "B";
    }
    absl::StatusOr<std::string> text = ReadFile(kHf + "/" + name + ".json");
    ASSERT_TRUE(text.ok());
    const nlohmann::json config = nlohmann::json::parse(*text);
    const std::string type = config["model_type"];
    const uint64_t by_hand = type == "gpt2"   ? Gpt2ByHand(config)
                             : type == "bert" ? BertByHand(config)
                             : type == "phi"  ? PhiByHand(config)
                             : type == "t5"   ? T5ByHand(config)
                                              : DecoderByHand(config);
    EXPECT_EQ(counted, by_hand) << name;
    if (card.exact != 0) {
      EXPECT_EQ(counted, card.exact) << name;
    }
    if (card.non_embedding_billions > 0) {
      const uint64_t embedding =
          uint64_t{config["vocab_size"]} * uint64_t{config["hidden_size"]} *
          (config.value("tie_word_embeddings", false) ? 1 : 2);
      EXPECT_LE(std::abs(static_cast<double>(counted - embedding) / 1e9 /
                             card.non_embedding_billions -
                         1),
                kCardTolerance)
          << name << " without embeddings";
    }
    // The memory model takes every one.
    EXPECT_TRUE(BuildProfile(**spec, v1::TrainingSetup()).ok()) << name;
  }
}

TEST(FullModelsTest, AnswersNameTheFileAndTheTemplateNamesTheFullModel) {
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(kModels);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  v1::ModelRef ref;
  ref.set_template_("llama-3.2-1b");
  absl::StatusOr<ResolvedModel> full =
      ResolveModelRef(ref, v1::TrainingSetup(), *catalog);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_FALSE(full->assumptions.empty());
  EXPECT_EQ(full->assumptions[0],
            "the full model: llama-3.2-1b is models/hf/llama-3.2-1b.json, the "
            "config.json of meta-llama/Llama-3.2-1B as published, converted "
            "by the Hugging Face front-end");
  EXPECT_EQ(full->template_name, "llama-3.2-1b");
  EXPECT_NE(full->catalog_spec, nullptr);

  // The measured GPT-2 template keeps its name and points at the full one.
  ref.set_template_("gpt2");
  absl::StatusOr<ResolvedModel> cut =
      ResolveModelRef(ref, v1::TrainingSetup(), *catalog);
  ASSERT_TRUE(cut.ok()) << cut.status();
  ASSERT_EQ(cut->assumptions.size(), 1u);
  EXPECT_THAT(cut->assumptions[0],
              HasSubstr("a cut-down template: gpt2 is reduced to 1 of its 12 "
                        "decoder layers"));
  EXPECT_THAT(cut->assumptions[0],
              HasSubstr("(the full model: --model gpt2-124m)"));
  EXPECT_EQ(catalog->FullModelOf("gpt2"), "gpt2-124m");
  ref.set_template_("bert-base");
  absl::StatusOr<ResolvedModel> bert =
      ResolveModelRef(ref, v1::TrainingSetup(), *catalog);
  ASSERT_TRUE(bert.ok()) << bert.status();
  EXPECT_EQ(bert->assumptions,
            std::vector<std::string>{
                "a cut-down template: bert-base is reduced to 1 of its 12 "
                "encoder layers; the answer is for this template, not the "
                "full model (the full model: --model bert-base-uncased)"});
  EXPECT_EQ(catalog->FullModelOf("bert-base"), "bert-base-uncased");
  EXPECT_EQ(catalog->FullModelOf("t5-small"), "");
  EXPECT_EQ(catalog->FullModelSourceOf("gpt2"), nullptr);
}

// A model named as a framework or the Hub names it answers as the catalog's
// full model, and says which.
TEST(FullModelsTest, HubIdsAndFrameworkNamesResolveToTheFullModel) {
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(kModels);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  v1::ModelRef ref;
  for (const char* id : {"meta-llama/Llama-3.1-8B", "llama3_1_8b"}) {
    ref.set_template_(id);
    absl::StatusOr<ResolvedModel> model =
        ResolveModelRef(ref, v1::TrainingSetup(), *catalog);
    ASSERT_TRUE(model.ok()) << id << ": " << model.status();
    EXPECT_EQ(model->template_name, "llama-3.1-8b") << id;
    ASSERT_FALSE(model->assumptions.empty());
    EXPECT_EQ(model->assumptions[0],
              absl::StrCat("'", id, "' is the catalog's llama-3.1-8b"));
  }
  ref.set_template_("meta-llama/Llama-9-1T");
  EXPECT_EQ(ResolveModelRef(ref, v1::TrainingSetup(), *catalog).status().code(),
            absl::StatusCode::kNotFound);
}

// At another length the config converts again, as the file itself would: a
// rotary model takes any length, GPT-2's learned table refuses more than
// 1024 positions.
TEST(FullModelsTest, OtherLengthsConvertTheConfigAgain) {
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(kModels);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  v1::ModelRef ref;
  ref.set_template_("qwen2.5-7b");
  v1::TrainingSetup setup;
  setup.set_positions(4096);
  absl::StatusOr<ResolvedModel> longer = ResolveModelRef(ref, setup, *catalog);
  ASSERT_TRUE(longer.ok()) << longer.status();
  EXPECT_EQ(longer->catalog_spec, nullptr);
  EXPECT_EQ(longer->spec().positions(), 4096u);
  EXPECT_EQ(longer->spec().name(), "qwen2.5-7b");
  EXPECT_EQ(CountParams(longer->spec()),
            CountParams(**catalog->Find("qwen2.5-7b")));

  ref.set_template_("gpt2-124m");
  setup.set_positions(2048);
  absl::StatusOr<ResolvedModel> too_long =
      ResolveModelRef(ref, setup, *catalog);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  // Refused before converting again: the table the catalog kept at load.
  EXPECT_EQ(too_long.status().message(),
            "setup.positions = 2048 is past gpt2-124m's learned position "
            "table (models/hf/gpt2-124m.json sets n_positions 1024); allowed "
            "1..1024");
}

// A broken index or config fails the catalog's load, naming the file.
TEST(FullModelsTest, BadIndexesAreRefusedByFile) {
  char pattern[] = "/tmp/headroom-fullmodels-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  std::filesystem::create_directory(dir + "/hf");
  absl::StatusOr<std::string> gpt2 = ReadFile(kHf + "/gpt2-124m.json");
  ASSERT_TRUE(gpt2.ok());
  std::ofstream(dir + "/hf/gpt2-124m.json") << *gpt2;
  auto load = [&](const std::string& index) {
    std::ofstream(dir + "/hf/index.json", std::ios::trunc) << index;
    return LoadModelCatalog(dir).status();
  };
  EXPECT_TRUE(
      load(
          R"({"models": [{"name": "gpt2-124m", "hub": "openai-community/gpt2"}]})")
          .ok());
  EXPECT_THAT(load(R"({"models": []})").message(),
              HasSubstr("gpt2-124m.json is not listed in"));
  EXPECT_THAT(load(R"([1])").message(),
              HasSubstr("must be a JSON object {\"models\": [...]}"));
  EXPECT_THAT(
      load(R"({"models": [{"name": "GPT2", "hub": "openai-community/gpt2"}]})")
          .message(),
      HasSubstr("name 'GPT2' must be 1..64 lowercase letters"));
  EXPECT_THAT(
      load(R"({"models": [{"name": "gpt2-124m", "hub": "gpt2"}]})").message(),
      HasSubstr("hub must name the Hub repository"));
  EXPECT_THAT(load(R"({"models": [{"name": "gpt2-124m", "hub": "a/b",
                                   "cut_down_template": "gpt2"}]})")
                  .message(),
              HasSubstr("'gpt2' is not a cut-down template of the catalog"));
  std::ofstream(dir + "/hf/gpt2-124m.json", std::ios::trunc)
      << R"({"model_type": "gpt2", "n_embd": 0})";
  const absl::Status broken =
      load(R"({"models": [{"name": "gpt2-124m", "hub": "a/b"}]})");
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken.message(), HasSubstr("hf/gpt2-124m.json: "));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace headroom
