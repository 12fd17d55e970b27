// The `vitpe` Python module (pybind11): models, classification and embedding, and the encodings'
// registry, over the C++ library. Arrays come in as numpy; a float32 input must be C-contiguous
// [B, C, H, W] (read in place), anything else is refused with the expected and found dtype and
// shape rather than converted silently. Images are numpy uint8 H x W (gray) or H x W x 3/4 in RGB
// order (bgr=True for OpenCV's order), or file paths. The GIL is released while the library
// computes; C++ exceptions become Python's (std::invalid_argument: ValueError, others:
// RuntimeError) with the library's messages.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <utility>
#include <vector>

#include "encodings/encoding.h"
#include "vit/compare/compare.h"
#include "vit/compare/report.h"
#include "vit/io/checkpoint.h"
#include "vit/io/classifier.h"
#include "vit/io/preprocess.h"
#include "vit/train/train.h"
#include "vitpe/vitpe_version.h"

namespace py = pybind11;
using namespace vitpe;

namespace {

// nlohmann JSON -> Python objects (dicts, lists, numbers, strings, None).
py::object to_python(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (const auto& [k, v] : j.items()) d[py::str(k)] = to_python(v);
      return d;
    }
    case nlohmann::json::value_t::array: {
      py::list l;
      for (const auto& v : j) l.append(to_python(v));
      return l;
    }
    case nlohmann::json::value_t::string:
      return py::str(j.get<std::string>());
    case nlohmann::json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(j.get<int64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(j.get<double>());
    default:
      return py::none();
  }
}

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string dtype_text(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// The input batch: a C-contiguous float32 [B, C, H, W] array, read in place.
Tensor batch_of(const py::array& x, const ModelConfig& c, const char* what) {
  const bool f32 = x.dtype().is(py::dtype::of<float>());
  const bool contiguous = (x.flags() & py::array::c_style) != 0;
  if (!f32 || !contiguous || x.ndim() != 4 || x.shape(1) != c.channels || x.shape(0) < 1) {
    throw py::value_error(std::string(what) + ": expected a C-contiguous float32 array [B, " +
                          std::to_string(c.channels) + ", H, W] (B >= 1), found " +
                          (contiguous ? "" : "a non-contiguous ") + dtype_text(x) +
                          " array of shape " + shape_text(x) +
                          " (np.ascontiguousarray(x, dtype=np.float32) converts one)");
  }
  return Tensor::wrap(static_cast<const float*>(x.data()),
                      {x.shape(0), x.shape(1), x.shape(2), x.shape(3)});
}

py::array_t<float> to_numpy(const Tensor& t) {
  std::vector<py::ssize_t> shape;
  for (int i = 0; i < t.shape().size(); ++i) shape.push_back(t.shape()[i]);
  py::array_t<float> out(shape);
  std::memcpy(out.mutable_data(), t.f32(), static_cast<size_t>(t.numel()) * sizeof(float));
  return out;
}

// One image: a path, or a uint8 array (H x W, H x W x 1/3/4; RGB order unless bgr) -> the
// cv::Mat in OpenCV's order that the library's Classifier takes.
cv::Mat image_of(const py::handle& obj, bool bgr, const std::string& name) {
  if (py::isinstance<py::str>(obj)) return decode_image(obj.cast<std::string>());
  if (!py::isinstance<py::array>(obj)) {
    throw py::value_error(name + ": expected a file path or a numpy uint8 array, found " +
                          py::str(obj.get_type()).cast<std::string>());
  }
  const py::array a = py::reinterpret_borrow<py::array>(obj);
  const bool u8 = a.dtype().is(py::dtype::of<uint8_t>());
  const int channels = a.ndim() == 2 ? 1 : a.ndim() == 3 ? static_cast<int>(a.shape(2)) : 0;
  if (!u8 || channels < 1 || channels > 4 || channels == 2 ||
      (a.flags() & py::array::c_style) == 0) {
    throw py::value_error(name +
                          ": expected a C-contiguous uint8 array H x W or H x W x 3/4, "
                          "found " +
                          dtype_text(a) + " of shape " + shape_text(a));
  }
  cv::Mat m(static_cast<int>(a.shape(0)), static_cast<int>(a.shape(1)), CV_8UC(channels),
            const_cast<void*>(a.data()));
  cv::Mat out;
  if (channels == 3 && !bgr) {
    cv::cvtColor(m, out, cv::COLOR_RGB2BGR);
  } else if (channels == 4 && !bgr) {
    cv::cvtColor(m, out, cv::COLOR_RGBA2BGRA);
  } else {
    out = m.clone();
  }
  return out;
}

std::vector<cv::Mat> images_of(const py::handle& obj, bool bgr) {
  std::vector<cv::Mat> out;
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    int i = 0;
    for (const py::handle& h : obj) out.push_back(image_of(h, bgr, "image " + std::to_string(i++)));
  } else {
    out.push_back(image_of(obj, bgr, "image"));
  }
  return out;
}

bool is_batch(const py::handle& obj) {
  return py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj);
}

LoadOptions load_options(int64_t heads, const std::string& preset, const std::string& encoding,
                         const std::string& mlp, bool assume_defaults) {
  LoadOptions o;
  o.heads = heads;
  o.preset = preset;
  o.encoding = encoding;
  o.mlp = mlp;
  o.assume_defaults = assume_defaults;
  return o;
}

// A loaded model: forward and features on preprocessed batches, the transform it carries.
class PyModel {
 public:
  explicit PyModel(LoadedModel m) : m_(std::move(m)), pre_(Preprocess::from(m_.model->config())) {}

  py::dict config() const { return to_python(nlohmann::json::parse(cfg().to_json())); }
  const std::vector<std::string>& notes() const { return m_.notes; }
  const std::string& format() const { return m_.format; }

  py::array_t<float> forward(const py::array& x) {
    const Tensor in = batch_of(x, cfg(), "Model.forward");
    Tensor out;
    {
      py::gil_scoped_release release;
      out = m_.model->forward(in).clone();
    }
    return to_numpy(out);
  }

  py::dict features(const py::array& x) {
    const Tensor in = batch_of(x, cfg(), "Model.features");
    Tensor tokens, pooled, logits;
    Model::Features f;
    {
      py::gil_scoped_release release;
      f = m_.model->forward_features(in);
      tokens = f.tokens->clone();
      pooled = f.pooled->clone();
      logits = f.logits->clone();
    }
    py::dict d;
    d["tokens"] = to_numpy(tokens);
    d["pooled"] = to_numpy(pooled);
    d["logits"] = to_numpy(logits);
    d["prefix"] = f.prefix;
    d["grid"] = py::make_tuple(f.grid.rows, f.grid.cols);
    return d;
  }

  // One image (path or array) -> [C, H, W] float32 as the model's preprocessing makes it.
  py::array_t<float> preprocess(const py::handle& image, bool bgr) const {
    const cv::Mat m = image_of(image, bgr, "image");
    py::array_t<float> out({static_cast<py::ssize_t>(pre_.channels),
                            static_cast<py::ssize_t>(pre_.rows),
                            static_cast<py::ssize_t>(pre_.cols)});
    preprocess_into(to_uint8_channels(m, pre_.channels, "image"), pre_, out.mutable_data());
    return out;
  }

 private:
  const ModelConfig& cfg() const { return m_.model->config(); }
  LoadedModel m_;
  Preprocess pre_;
};

py::list predictions(const std::vector<Prediction>& top) {
  py::list l;
  for (const Prediction& p : top) {
    py::dict d;
    d["index"] = p.index;
    d["label"] = p.label;
    d["probability"] = p.probability;
    l.append(d);
  }
  return l;
}

// ---- research: train and compare -----------------------------------------------------------

// Takes key out of kw (if there) as T.
template <typename T>
bool take(py::dict& kw, const char* key, T& into) {
  if (!kw.contains(key)) return false;
  into = kw[key].cast<T>();
  PyDict_DelItemString(kw.ptr(), key);
  return true;
}

// The CLI's training flags as keywords (their names with '_' for '-'): every one given is applied
// to `o`; the caller refuses what is left.
void take_train_options(py::dict& kw, TrainOptions& o) {
  take(kw, "model", o.model);
  take(kw, "encoding", o.encoding);
  take(kw, "set", o.overrides);
  take(kw, "init", o.init);
  take(kw, "init_heads", o.init_heads);
  take(kw, "init_preset", o.init_preset);
  take(kw, "layer_decay", o.layer_decay);
  take(kw, "freeze", o.freeze);
  take(kw, "head_lr", o.head_lr);
  take(kw, "dataset", o.data.name);
  take(kw, "data_dir", o.data.dir);
  int64_t size = 0;
  if (take(kw, "size", size)) o.data.rows = o.data.cols = size;
  take(kw, "subset", o.data.limit);
  take(kw, "test_subset", o.test_limit);
  take(kw, "data_seed", o.data.seed);
  take(kw, "epochs", o.epochs);
  take(kw, "batch", o.batch);
  take(kw, "lr", o.lr);
  take(kw, "min_lr", o.min_lr);
  take(kw, "warmup", o.warmup_epochs);
  take(kw, "wd", o.weight_decay);
  take(kw, "smoothing", o.smoothing);
  take(kw, "clip", o.clip);
  take(kw, "seed", o.seed);
  take(kw, "augment", o.augment);
  take(kw, "flip", o.flip);
  // scale=(MIN, MAX), ratio=(MIN, MAX): the random-resized crop, as --scale and --ratio.
  std::pair<double, double> range;
  if (take(kw, "scale", range)) {
    if (!o.data.random_crop) o.data.random_crop = RandomResizedCrop{};
    o.data.random_crop->scale_min = range.first;
    o.data.random_crop->scale_max = range.second;
  }
  if (take(kw, "ratio", range)) {
    if (!o.data.random_crop) o.data.random_crop = RandomResizedCrop{};
    o.data.random_crop->ratio_min = range.first;
    o.data.random_crop->ratio_max = range.second;
  }
  // train_sizes=[20, 28, 36]: multi-resolution batches, as --train-sizes.
  take(kw, "train_sizes", o.train_sizes);
  take(kw, "eval_batch", o.eval_batch);
  take(kw, "log_every", o.log_every);
  take(kw, "resume", o.resume);
  take(kw, "force", o.force);
}

constexpr const char* kTrainKeys =
    "model, encoding, set, init, init_heads, init_preset, layer_decay, freeze, head_lr, dataset, "
    "data_dir, size, subset, test_subset, data_seed, epochs, batch, lr, min_lr, warmup, wd, "
    "smoothing, clip, seed, augment, flip, scale, ratio, train_sizes, eval_batch, log_every, "
    "resume, force, progress";

void refuse_leftovers(const py::dict& kw, const char* fn, const std::string& accepted) {
  if (kw.empty()) return;
  std::string names;
  for (const auto& [k, v] : kw)
    names += (names.empty() ? "'" : ", '") + py::str(k).cast<std::string>() + "'";
  throw py::type_error(std::string(fn) + "(): unknown keyword " + names +
                       "; accepted: " + accepted);
}

// progress: None (quiet), True (the library's bars on stderr) or a callable that gets a dict per
// step and per finished epoch. Either way every step checks for Ctrl-C (and other signals): a
// KeyboardInterrupt stops the run there, as a kill would, and reaches the caller.
void set_progress(TrainOptions& o, const py::object& progress) {
  o.progress = o.verbose = progress.is(py::bool_(true));
  py::object callback =
      progress.is_none() || py::isinstance<py::bool_>(progress) ? py::object() : progress;
  if (callback && !PyCallable_Check(callback.ptr())) {
    throw py::type_error("progress: expected None, True or a callable, found " +
                         py::str(progress.get_type()).cast<std::string>());
  }
  o.on_progress = [callback](const TrainProgress& p) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (!callback) return;
    py::dict d;
    d["encoding"] = p.encoding;
    d["seed"] = p.seed;
    d["epoch"] = p.epoch;
    d["epochs"] = p.epochs;
    d["batch"] = p.batch;
    d["batches"] = p.batches;
    d["step"] = p.step;
    d["loss"] = p.loss;
    d["accuracy"] = p.accuracy;
    d["epoch_done"] =
        p.epoch_done ? to_python(epoch_record_json(*p.epoch_done)) : py::object(py::none());
    callback(d);
  };
}

py::dict train_result(const TrainResult& r) {
  py::dict d;
  d["config"] = to_python(nlohmann::json::parse(r.config.to_json()));
  d["params"] = r.params;
  py::list history;
  for (const EpochRecord& e : r.history) history.append(to_python(epoch_record_json(e)));
  d["history"] = history;
  d["train_seconds"] = r.train_seconds;
  d["best_test_acc"] = r.best_test_acc;
  d["finished"] = r.finished;
  return d;
}

}  // namespace

PYBIND11_MODULE(_vitpe, m) {
  m.doc() = "vitpe: Vision Transformers with interchangeable 2D positional encodings";
  m.def(
      "version", [] { return std::string(version()); }, "The library's version");

  py::class_<PyModel>(m, "Model", "A loaded model (vitpe.load)")
      .def_property_readonly("config", &PyModel::config, "The model's config as a dict")
      .def_property_readonly("notes", &PyModel::notes, "How the config was obtained")
      .def_property_readonly("format", &PyModel::format,
                             "The file's layout: 'vitpe', 'timm ViT', ..., or 'preset'")
      .def("forward", &PyModel::forward, py::arg("x"),
           "float32 [B, C, H, W] (C-contiguous) -> logits [B, classes] (or the pooled features "
           "of a model without a head)")
      .def("features", &PyModel::features, py::arg("x"),
           "float32 [B, C, H, W] -> {'tokens' [B, N, D], 'pooled' [B, D], 'logits', 'prefix', "
           "'grid'} of one pass")
      .def("preprocess", &PyModel::preprocess, py::arg("image"), py::arg("bgr") = false,
           "An image (path, or uint8 H x W [x 3/4] in RGB order) -> float32 [C, H, W]");

  m.def(
      "load",
      [](const std::string& path, int64_t heads, const std::string& preset,
         const std::string& encoding, const std::string& mlp, bool assume_defaults) {
        LoadedModel lm;
        const LoadOptions o = load_options(heads, preset, encoding, mlp, assume_defaults);
        {
          py::gil_scoped_release release;
          lm = load_model(path, o);
        }
        return PyModel(std::move(lm));
      },
      py::arg("path_or_preset"), py::arg("heads") = 0, py::arg("preset") = "",
      py::arg("encoding") = "", py::arg("mlp") = "", py::arg("assume_defaults") = false,
      "A checkpoint (ours, timm, torchvision) or a preset name; the keywords are the CLI's flags");

  py::class_<Classifier>(m, "Classifier",
                         "A model with its preprocessing: classify and embed images")
      .def(py::init([](const std::string& path, int threads, int64_t heads,
                       const std::string& preset, const std::string& encoding,
                       const std::string& mlp, bool assume_defaults, int streams,
                       bool pack_weights) {
             ClassifierOptions o;
             o.threads = threads;
             o.streams = streams;
             o.pack_weights = pack_weights;
             o.load = load_options(heads, preset, encoding, mlp, assume_defaults);
             py::gil_scoped_release release;
             return std::make_unique<Classifier>(path, o);
           }),
           py::arg("path_or_preset"), py::arg("threads") = 0, py::arg("heads") = 0,
           py::arg("preset") = "", py::arg("encoding") = "", py::arg("mlp") = "",
           py::arg("assume_defaults") = false, py::arg("streams") = 1,
           py::arg("pack_weights") = true)
      .def_property_readonly("streams", &Classifier::streams,
                             "Concurrent forwards (throughput streams), each on threads / streams")
      .def(
          "classify",
          [](Classifier& c, const py::object& images, int k, bool bgr) -> py::object {
            const std::vector<cv::Mat> mats = images_of(images, bgr);
            std::vector<std::vector<Prediction>> top;
            {
              py::gil_scoped_release release;
              top = c.classify(mats, k);
            }
            if (!is_batch(images)) return predictions(top.front());
            py::list out;
            for (const auto& t : top) out.append(predictions(t));
            return out;
          },
          py::arg("images"), py::arg("k") = 5, py::arg("bgr") = false,
          "An image (path or uint8 array) or a list of them -> the k most probable classes "
          "(dicts of index, label, probability); a list gives a list")
      .def(
          "embed",
          [](Classifier& c, const py::object& images, bool normalize, bool bgr) {
            const std::vector<cv::Mat> mats = images_of(images, bgr);
            std::vector<std::vector<float>> v;
            {
              py::gil_scoped_release release;
              v = c.embed(mats, normalize);
            }
            const py::ssize_t n = static_cast<py::ssize_t>(v.size());
            const py::ssize_t d = n ? static_cast<py::ssize_t>(v[0].size()) : 0;
            py::array_t<float> out({n, d});
            for (py::ssize_t i = 0; i < n; ++i) {
              std::memcpy(out.mutable_data(i, 0), v[i].data(), d * sizeof(float));
            }
            return out;
          },
          py::arg("images"), py::arg("normalize") = false, py::arg("bgr") = false,
          "Images -> float32 [N, D]: the pooled features the head reads (unit rows with "
          "normalize)")
      .def_property_readonly("config",
                             [](const Classifier& c) {
                               return to_python(nlohmann::json::parse(c.config().to_json()));
                             })
      .def_property_readonly("notes", &Classifier::notes);

  m.def(
      "train",
      [](const py::kwargs& kwargs) {
        py::dict kw(kwargs);
        TrainOptions o;
        take_train_options(kw, o);
        py::object progress = py::none();
        if (kw.contains("progress")) {
          progress = kw["progress"];
          PyDict_DelItemString(kw.ptr(), "progress");
        }
        take(kw, "out", o.out);
        refuse_leftovers(kw, "train", std::string(kTrainKeys) + ", out");
        set_progress(o, progress);
        TrainResult r;
        {
          py::gil_scoped_release release;
          r = train(o);
        }
        py::dict d = train_result(r);
        LoadedModel trained;
        trained.model = std::move(r.model);
        trained.format = "trained";
        d["model"] = PyModel(std::move(trained));
        return d;
      },
      "Trains a model as `vitpe train` does; keywords are its flags (model, encoding, set, "
      "dataset, size, subset, epochs, batch, lr, seed, out, resume, ...; progress: None, True or "
      "a callable). Returns {'config', 'params', 'history', 'best_test_acc', 'finished', "
      "'model', ...}; Ctrl-C stops it as a kill would (resume=True continues from out)");

  m.def(
      "compare",
      [](const std::string& out, const py::kwargs& kwargs) {
        py::dict kw(kwargs);
        CompareOptions o;
        o.out = out;
        take_train_options(kw, o.train);
        py::object progress = py::none();
        if (kw.contains("progress")) {
          progress = kw["progress"];
          PyDict_DelItemString(kw.ptr(), "progress");
        }
        take(kw, "encodings", o.encodings);
        take(kw, "seeds", o.seeds);
        take(kw, "eval_sizes", o.sizes);
        std::vector<std::string> policies;
        if (take(kw, "policy", policies)) {
          o.policies.clear();
          for (const std::string& p : policies) o.policies.push_back(parse_policy(p));
        }
        take(kw, "protocol", o.protocols);
        take(kw, "patch_resize", o.patch_resize);
        take(kw, "reference", o.reference);
        take(kw, "pictures", o.pictures);
        take(kw, "budget", o.budget_minutes);
        refuse_leftovers(kw, "compare",
                         std::string(kTrainKeys) +
                             ", encodings, seeds, eval_sizes, policy, protocol, patch_resize, reference, "
                             "pictures, budget");
        set_progress(o.train, progress);
        o.extra_settings = {{"command", "vitpe.compare (Python)"}};
        CompareResults r;
        {
          py::gil_scoped_release release;
          r = run_compare(o);
          write_compare_outputs(r, o.out);
        }
        return to_python(nlohmann::json::parse(results_json(r)));
      },
      py::arg("out"),
      "Compares encodings as `vitpe compare` does (out: the results directory, which gets "
      "results.json, results.csv and report.html); the other keywords are its flags and "
      "train's. Returns the content of results.json as Python objects");

  py::module_ enc = m.def_submodule(
      "encodings", "The position-encoding kinds, and their tables as numpy arrays for plotting");
  enc.def(
      "list",
      [] {
        py::list out;
        for (const EncodingKindInfo& k : encoding_kinds()) {
          py::dict d;
          d["name"] = k.name;
          d["site"] = site_name(k.site);
          d["options"] = k.options;
          d["summary"] = k.summary;
          d["extension"] = rule_name(k.extension);
          out.append(d);
        }
        return out;
      },
      "The kinds: name, site, options, summary, extension rule");
  enc.def(
      "table",
      [](const std::string& spec, std::pair<int64_t, int64_t> grid, int64_t dim, int64_t prefix,
         uint64_t seed) {
        Rng rng(seed);
        const Grid g{grid.first, grid.second};
        std::unique_ptr<TokenEncoding> e =
            make_token_encoding(parse_encoding(spec), dim, g, prefix, rng);
        if (!e) throw py::value_error("encodings.table: '" + spec + "' has no token part");
        return to_numpy(e->table(g));
      },
      py::arg("spec"), py::arg("grid") = std::pair<int64_t, int64_t>{14, 14}, py::arg("dim") = 384,
      py::arg("prefix") = 0, py::arg("seed") = 0,
      "A token encoding's table [prefix + rows * cols, dim] (learned kinds as initialised from "
      "seed): what it adds to the tokens");
  enc.def(
      "similarity",
      [](const std::string& spec, std::pair<int64_t, int64_t> grid, int64_t dim, uint64_t seed) {
        Rng rng(seed);
        const Grid g{grid.first, grid.second};
        std::unique_ptr<TokenEncoding> e =
            make_token_encoding(parse_encoding(spec), dim, g, 0, rng);
        if (!e) throw py::value_error("encodings.similarity: '" + spec + "' has no token part");
        const Tensor t = e->table(g);
        const int64_t n = g.count();
        std::vector<double> norm(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          double q = 0;
          for (int64_t c = 0; c < dim; ++c)
            q += static_cast<double>(t.at(i * dim + c)) * t.at(i * dim + c);
          norm[static_cast<size_t>(i)] = std::sqrt(q);
        }
        py::array_t<float> out({n, n});
        float* o = out.mutable_data();
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double d = 0;
            for (int64_t c = 0; c < dim; ++c)
              d += static_cast<double>(t.at(i * dim + c)) * t.at(j * dim + c);
            const double den = norm[static_cast<size_t>(i)] * norm[static_cast<size_t>(j)];
            o[i * n + j] = static_cast<float>(den > 0 ? d / den : 0.0);
          }
        return out;
      },
      py::arg("spec"), py::arg("grid") = std::pair<int64_t, int64_t>{14, 14}, py::arg("dim") = 384,
      py::arg("seed") = 0,
      "The cosine similarity of every patch's encoding to every other's [N, N] (N = rows * cols, "
      "row-major): the ViT paper's Figure 7, what the similarity picture draws");
  enc.def(
      "attention",
      [](const std::string& spec, std::pair<int64_t, int64_t> grid, int64_t heads, int64_t head_dim,
         int64_t prefix, uint64_t seed) {
        Rng rng(seed);
        const Grid g{grid.first, grid.second};
        std::unique_ptr<AttentionEncoding> e =
            make_attention_encoding(parse_encoding(spec), heads, head_dim, g, prefix, rng);
        if (!e) throw py::value_error("encodings.attention: '" + spec + "' has no attention part");
        const AttnGeometry geom{g, prefix};
        const int64_t n = geom.tokens();
        if (e->has_bias()) {
          Tensor bias = Tensor::empty({heads, n, n});
          e->bias(bias, geom);
          return to_numpy(bias);
        }
        // Rotation kinds: <R(p) 1, R(p') 1> / hd, the score the rotation alone gives.
        Tensor ones = Tensor::empty({1, heads, n, head_dim});
        for (int64_t i = 0; i < ones.numel(); ++i) ones.at(i) = 1.0f;
        Tensor q = Tensor::empty(ones.shape()), k = Tensor::empty(ones.shape());
        e->rotate(q, k, ones, ones, geom);
        py::array_t<float> out({heads, n, n});
        float* o = out.mutable_data();
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double d = 0;
              for (int64_t c = 0; c < head_dim; ++c)
                d += static_cast<double>(q.at((h * n + i) * head_dim + c)) *
                     k.at((h * n + j) * head_dim + c);
              o[(h * n + i) * n + j] = static_cast<float>(d / static_cast<double>(head_dim));
            }
        return out;
      },
      py::arg("spec"), py::arg("grid") = std::pair<int64_t, int64_t>{14, 14}, py::arg("heads") = 6,
      py::arg("head_dim") = 64, py::arg("prefix") = 0, py::arg("seed") = 0,
      "An attention encoding's term [heads, N, N] over prefix + rows * cols tokens: the bias of "
      "bias kinds (relbias, alibi2d, cpb), the score <R(p) 1, R(p') 1> / head_dim that the "
      "rotation alone gives for RoPE kinds (what the attention picture draws)");
}
