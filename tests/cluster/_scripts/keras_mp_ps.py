"""ModelParallel over parameter servers: worker 0 connects to 2 ps and splits a layer's kernel across them."""
import json
import sys
from pathlib import Path

import keras
import numpy as np

import toolkit
from strategies import ServeOptions
from strategies.device_map import in_graph_session, run_in_graph_role
from toolkit.keras_distribution import placement_rows

cfg = run_in_graph_role(options=ServeOptions.from_env(chief_start_timeout=120))  # the ps serve here, then exit
toolkit.enable_keras_distribution()
with in_graph_session(cfg, timeout=120):
    ps = [d for d in keras.distribution.list_devices() if d.startswith("/job:ps")]
    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], ps)
    layouts = keras.distribution.LayoutMap(mesh)
    layouts["table/kernel"] = ("model", None)  # a large input layer, its rows split across the ps
    keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layouts))
    inputs = keras.Input((64,))
    hidden = keras.layers.Dense(32, activation="relu", name="table")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, name="head")(hidden))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 64)).astype("float32")
    y = (x[:, :4] @ np.array([[1.0], [-2.0], [0.5], [3.0]])).astype("float32")
    history = model.fit(x, y, epochs=4, batch_size=32, verbose=0)
    Path(sys.argv[1]).write_text(json.dumps({"ps": ps, "rows": placement_rows(model),
                                             "loss": history.history["loss"]}))
