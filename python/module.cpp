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

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "encodings/encoding.h"
#include "vit/io/checkpoint.h"
#include "vit/io/classifier.h"
#include "vit/io/preprocess.h"
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
    throw py::value_error(name + ": expected a C-contiguous uint8 array H x W or H x W x 3/4, "
                          "found " + dtype_text(a) + " of shape " + shape_text(a));
  }
  cv::Mat m(static_cast<int>(a.shape(0)), static_cast<int>(a.shape(1)),
            CV_8UC(channels), const_cast<void*>(a.data()));
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

}  // namespace

PYBIND11_MODULE(_vitpe, m) {
  m.doc() = "vitpe: Vision Transformers with interchangeable 2D positional encodings";
  m.def("version", [] { return std::string(version()); }, "The library's version");

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
                       const std::string& mlp, bool assume_defaults) {
             ClassifierOptions o;
             o.threads = threads;
             o.load = load_options(heads, preset, encoding, mlp, assume_defaults);
             py::gil_scoped_release release;
             return std::make_unique<Classifier>(path, o);
           }),
           py::arg("path_or_preset"), py::arg("threads") = 0, py::arg("heads") = 0,
           py::arg("preset") = "", py::arg("encoding") = "", py::arg("mlp") = "",
           py::arg("assume_defaults") = false)
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
      .def_property_readonly(
          "config", [](const Classifier& c) { return to_python(nlohmann::json::parse(c.config().to_json())); })
      .def_property_readonly("notes", &Classifier::notes);

  m.def(
      "encodings",
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
      "The position-encoding kinds: name, site, options, summary, extension rule");
}
